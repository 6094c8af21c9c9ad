package main

import (
	"crypto/tls"
	stdx509 "crypto/x509"
	"net"
	"net/netip"
	"testing"
	"time"

	talosconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// clusterConfig is a control plane's machine config and the bundle it came from, whose
// admin client certificate Omni's talosconfig holds.
func clusterConfig(t *testing.T) ([]byte, *secrets.Bundle) {
	t.Helper()

	bundle, err := secrets.NewBundle(secrets.NewFixedClock(time.Now()), talosconfig.TalosVersionCurrent)
	require.NoError(t, err)

	in, err := generate.NewInput("lab", "https://10.0.0.1:6443", "v1.32.0", generate.WithSecretsBundle(bundle))
	require.NoError(t, err)

	cfg, err := in.Config(machine.TypeControlPlane)
	require.NoError(t, err)

	b, err := cfg.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
	require.NoError(t, err)

	return b, bundle
}

// TestServerTLS: installed, the API serves a certificate of the config's machine CA for
// its address and takes only clients that CA signed, as Omni's talosconfig is.
func TestServerTLS(t *testing.T) {
	t.Parallel()

	cfg, bundle := clusterConfig(t)

	serverTLS, err := serverTLS(cfg, time.Now())
	require.NoError(t, err)

	srvConf, err := serverTLS([]netip.Addr{netip.MustParseAddr("127.0.0.1")})
	require.NoError(t, err)

	lis, err := tls.Listen("tcp", "127.0.0.1:0", srvConf)
	require.NoError(t, err)

	t.Cleanup(func() { lis.Close() })

	go func() {
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}

			// The handshake's outcome is the client's to see.
			if tc, ok := conn.(*tls.Conn); ok {
				_ = tc.Handshake()
			}
			conn.Close()
		}
	}()

	roots := stdx509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(bundle.Certs.OS.Crt))

	admin, err := bundle.GenerateTalosAPIClientCertificate(role.MakeSet(role.Admin))
	require.NoError(t, err)

	adminPair, err := tls.X509KeyPair(admin.Crt, admin.Key)
	require.NoError(t, err)

	_, other := clusterConfig(t)

	stranger, err := other.GenerateTalosAPIClientCertificate(role.MakeSet(role.Admin))
	require.NoError(t, err)

	strangerPair, err := tls.X509KeyPair(stranger.Crt, stranger.Key)
	require.NoError(t, err)

	for name, tc := range map[string]struct {
		certs []tls.Certificate
		ok    bool
	}{
		"the cluster's admin":          {certs: []tls.Certificate{adminPair}, ok: true},
		"no client certificate":        {},
		"another cluster's admin cert": {certs: []tls.Certificate{strangerPair}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()

			conn, err := tls.Dial("tcp", lis.Addr().String(), &tls.Config{RootCAs: roots, Certificates: tc.certs, MinVersion: tls.VersionTLS13})
			if err == nil {
				// TLS 1.3 reports a refused client certificate on the first read.
				_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
				_, err = conn.Read(make([]byte, 1))
				conn.Close()

				if ne, ok := err.(net.Error); ok && ne.Timeout() { //nolint:errorlint // a net.Error's timeout
					err = nil
				}
			}

			if tc.ok {
				assert.True(t, err == nil || err.Error() == "EOF", "%v", err)
			} else {
				assert.Error(t, err)
				assert.NotEqual(t, "EOF", errString(err))
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}

	return err.Error()
}

func TestServerTLSBadConfig(t *testing.T) {
	t.Parallel()

	for name, cfg := range map[string]string{
		"not YAML":   "{{{",
		"no machine": "apiVersion: v1alpha1\nkind: EventSinkConfig\nendpoint: '[fdae::1]:8091'\n",
		"no CA key":  "version: v1alpha1\nmachine:\n  type: worker\n  ca:\n    crt: \"\"\n",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()

			_, err := serverTLS([]byte(cfg), time.Now())
			assert.Error(t, err)
		})
	}
}
