package config_test

import (
	"fmt"
	"net/url"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/agent/internal/config"
	"github.com/anvil-metal/anvil/internal/bootparams"
)

// token is shaped like Omni's v2 join token: base64 with '+', '/' and '=', which the URL
// carries percent-encoded (url.Values.Encode, as Omni writes it).
const (
	token        = "v2:eyJleHRyYV9kYXRhIjp7fX0+/ab=="
	tokenEncoded = "v2%3AeyJleHRyYV9kYXRhIjp7fX0%2B%2Fab%3D%3D"
)

// TestOmniParamNames: the names are Talos' own, which Omni's join arguments use.
func TestOmniParamNames(t *testing.T) {
	t.Parallel()

	assert.Equal(t, constants.KernelParamSideroLink, bootparams.SideroLinkAPI)
	assert.Equal(t, constants.KernelParamEventsSink, bootparams.EventsSink)
	assert.Equal(t, constants.KernelParamLoggingKernel, bootparams.LoggingKernel)
}

func TestOmniFromCmdline(t *testing.T) {
	t.Parallel()

	// The arguments of an Omni ProviderJoinConfig, after the provider's own.
	c := config.FromCmdline("console=ttyS0 anvil.provider=10.77.0.1:50042 " +
		"siderolink.api=grpc://10.5.0.1:8090?jointoken=" + tokenEncoded + " " +
		"talos.events.sink=[fdae:41e4:649b:9303::1]:8091 " +
		"talos.logging.kernel=tcp://[fdae:41e4:649b:9303::1]:8092 quiet")

	o, err := c.Omni()
	require.NoError(t, err)
	require.NotNil(t, o.API)
	assert.Equal(t, config.SideroLinkAPI{Host: "10.5.0.1:8090", Insecure: true, JoinToken: token}, *o.API)
	assert.Equal(t, "[fdae:41e4:649b:9303::1]:8091", o.EventsSink)
	require.NotNil(t, o.KernelLog)
	assert.Equal(t, "tcp://[fdae:41e4:649b:9303::1]:8092", o.KernelLog.String())

	// The flags override the cmdline's, as for the provider's parameters.
	merged := c.Merge(config.Config{KernelLog: "udp://127.0.0.1:9"})
	assert.Equal(t, "udp://127.0.0.1:9", merged.KernelLog)
	assert.Equal(t, c.SideroLinkAPI, merged.SideroLinkAPI)

	// No Omni arguments: nothing to join, and no error.
	none, err := config.FromCmdline("console=ttyS0 anvil.provider=10.77.0.1:50042").Omni()
	require.NoError(t, err)
	assert.Equal(t, config.Omni{}, none)
}

func TestSideroLinkAPI(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name, value string
		want        config.SideroLinkAPI
		err         string
	}{
		{name: "grpc", value: "grpc://omni.example:8090?jointoken=" + tokenEncoded, want: config.SideroLinkAPI{Host: "omni.example:8090", Insecure: true, JoinToken: token}},
		{name: "https", value: "https://omni.example:8443/?jointoken=abc", want: config.SideroLinkAPI{Host: "omni.example:8443", JoinToken: "abc"}},
		{name: "https default port", value: "https://omni.example?jointoken=abc", want: config.SideroLinkAPI{Host: "omni.example:443", JoinToken: "abc"}},
		{name: "no scheme is grpc", value: "10.5.0.1:8090?jointoken=abc", want: config.SideroLinkAPI{Host: "10.5.0.1:8090", Insecure: true, JoinToken: "abc"}},
		{name: "ipv6", value: "grpc://[2001:db8::1]:8090?jointoken=abc", want: config.SideroLinkAPI{Host: "[2001:db8::1]:8090", Insecure: true, JoinToken: "abc"}},
		{name: "other parameters kept apart", value: "grpc://h:1?grpc_tunnel=false&jointoken=abc", want: config.SideroLinkAPI{Host: "h:1", Insecure: true, JoinToken: "abc"}},
		{name: "http", value: "http://omni.example:80?jointoken=abc", err: `scheme "http" is neither grpc:// nor https://`},
		{name: "no host", value: "grpc://:8090?jointoken=abc", err: "siderolink.api names no host"},
		{name: "bad port", value: "grpc://omni.example:99999?jointoken=abc", err: "the port of omni.example is not a port number"},
		{name: "port zero", value: "grpc://omni.example:0?jointoken=abc", err: "is not a port number"},
		{name: "not a url", value: "grpc://omni example?jointoken=abc", err: "siderolink.api is not a URL"},
		{name: "control character", value: "grpc://h:1?jointoken=a\x7fb", err: "siderolink.api is not a URL"},
		{name: "no token", value: "grpc://omni.example:8090", err: "siderolink.api has no jointoken parameter"},
		{name: "empty token", value: "grpc://omni.example:8090?jointoken=", err: "has no jointoken parameter"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			o, err := config.Config{SideroLinkAPI: tc.value}.Omni()
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				assert.Nil(t, o.API)

				return
			}

			require.NoError(t, err)
			require.NotNil(t, o.API)
			assert.Equal(t, tc.want, *o.API)
		})
	}
}

// TestSideroLinkAPISecret: the join token appears in no error and no formatting of the
// parsed API, wherever a malformed value put it.
func TestSideroLinkAPISecret(t *testing.T) {
	t.Parallel()

	const secret = "s3cretT0ken"

	for _, value := range []string{
		"grpc://omni example?jointoken=" + secret,
		"grpc://omni.example:" + secret + "?jointoken=" + secret,
		"grpc://omni.example:8090/jointoken=" + secret,
		"ftp://" + secret + "@omni.example?jointoken=" + secret,
		"grpc://omni.example:8090?jointoken=%zz" + secret,
		secret,
	} {
		_, err := config.Config{SideroLinkAPI: value}.Omni()
		require.Error(t, err, value)
		assert.NotContains(t, err.Error(), secret, value)
	}

	o, err := config.Config{SideroLinkAPI: "https://omni.example?jointoken=" + secret}.Omni()
	require.NoError(t, err)

	for _, s := range []string{
		o.API.String(), fmt.Sprint(o.API), fmt.Sprintf("%v", *o.API), fmt.Sprintf("%+v", *o.API), fmt.Sprintf("%#v", *o.API), fmt.Sprintf("%+v", o),
	} {
		assert.NotContains(t, s, secret)
		assert.Contains(t, s, "omni.example:443")
	}
}

func TestEventsSinkAndKernelLog(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name     string
		cfg      config.Config
		sink     string
		kernel   string
		errParts []string
	}{
		{name: "ipv6", cfg: config.Config{EventsSink: "[fdae::1]:8091", KernelLog: "tcp://[fdae::1]:8092"}, sink: "[fdae::1]:8091", kernel: "tcp://[fdae::1]:8092"},
		{name: "udp and a name", cfg: config.Config{EventsSink: "omni.example:8091", KernelLog: "udp://logs.example:514"}, sink: "omni.example:8091", kernel: "udp://logs.example:514"},
		{name: "sink without port", cfg: config.Config{EventsSink: "fdae::1"}, errParts: []string{`talos.events.sink="fdae::1" is not host:port`}},
		{name: "sink bad port", cfg: config.Config{EventsSink: "[fdae::1]:http"}, errParts: []string{`"http" is not a port number`}},
		{name: "sink no host", cfg: config.Config{EventsSink: ":8091"}, errParts: []string{"is not host:port"}},
		{name: "kernel scheme", cfg: config.Config{KernelLog: "http://[fdae::1]:8092"}, errParts: []string{"talos.logging.kernel", "neither tcp:// nor udp://"}},
		{name: "kernel bare", cfg: config.Config{KernelLog: "[fdae::1]:8092"}, errParts: []string{"talos.logging.kernel"}},
		{name: "kernel no port", cfg: config.Config{KernelLog: "tcp://[fdae::1]"}, errParts: []string{"the port is missing"}},
		{name: "kernel no host", cfg: config.Config{KernelLog: "tcp://:8092"}, errParts: []string{"names no host"}},
		{name: "kernel not a url", cfg: config.Config{KernelLog: "tcp://[fdae::1:8092"}, errParts: []string{"is not a URL"}},
		{
			name: "all at once", cfg: config.Config{SideroLinkAPI: "grpc://h:1", EventsSink: "x", KernelLog: "tcp://h"},
			errParts: []string{"siderolink.api", "talos.events.sink", "talos.logging.kernel"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			o, err := tc.cfg.Omni()
			if len(tc.errParts) > 0 {
				require.Error(t, err)

				for _, p := range tc.errParts {
					assert.ErrorContains(t, err, p)
				}

				assert.Equal(t, config.Omni{}, o)

				return
			}

			require.NoError(t, err)
			assert.Equal(t, tc.sink, o.EventsSink)

			want, err := url.Parse(tc.kernel)
			require.NoError(t, err)
			assert.Equal(t, want, o.KernelLog)
		})
	}
}

// FuzzOmni: no input panics, and the join token never shows in an error.
func FuzzOmni(f *testing.F) {
	for _, s := range []string{"grpc://h:1?jointoken=x", "https://[::1]?jointoken=%41", "tcp://[::1]:1", "::::", "%", "[", "a://b:c@d:e/f?g#h"} {
		f.Add(s)
	}

	f.Fuzz(func(t *testing.T, v string) {
		_, _ = config.Config{SideroLinkAPI: v, EventsSink: v, KernelLog: v}.Omni()

		const secret = "zzSECRETzz"

		_, err := config.Config{SideroLinkAPI: v + "?jointoken=" + secret}.Omni()
		if err != nil && len(v) < 64 {
			assert.NotContains(t, err.Error(), secret)
		}
	})
}
