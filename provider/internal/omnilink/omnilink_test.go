package omnilink_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	omniadapterv1 "github.com/anvil-metal/anvil/api/omniadapter/v1"
	"github.com/anvil-metal/anvil/provider/internal/omnilink"
)

// shortDir is a directory whose socket paths fit in a sun_path (108 bytes).
func shortDir(t *testing.T) string {
	t.Helper()

	dir, err := os.MkdirTemp("", "omnilink")
	require.NoError(t, err)

	t.Cleanup(func() { os.RemoveAll(dir) })

	return dir
}

// TestLink: the adapter API on its socket (mode 0600) takes Omni's join config, refusing
// args that could break an iPXE script, and the provider's services read it from the link.
func TestLink(t *testing.T) {
	t.Parallel()

	link := omnilink.New(omnilink.Options{Socket: filepath.Join(shortDir(t), "omni-adapter.sock"), Logger: zaptest.NewLogger(t)})

	_, ok := link.JoinArgs()
	assert.False(t, ok)

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)

	go func() { done <- link.Serve(ctx) }()

	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})

	require.Eventually(t, func() bool {
		fi, err := os.Stat(link.Socket())

		return err == nil && fi.Mode().Perm() == 0o600
	}, 10*time.Second, 10*time.Millisecond)

	conn, err := grpc.NewClient("unix://"+link.Socket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)

	t.Cleanup(func() { conn.Close() })

	client := omniadapterv1.NewOmniAdapterServiceClient(conn)
	join := []string{"siderolink.api=grpc://10.77.0.3:8090?jointoken=v2%3Asecret", "talos.events.sink=[fdae:41e4:649b:9303::1]:8091"}

	for _, tc := range []struct {
		name string
		args []string
		code codes.Code
	}{
		{"join config", join, codes.OK},
		{"a space", []string{"a=1 chain http://evil"}, codes.InvalidArgument},
		{"a newline", []string{"a=1\nchain http://evil"}, codes.InvalidArgument},
		{"empty arg", []string{""}, codes.InvalidArgument},
		{"too long", []string{strings.Repeat("a", 5000)}, codes.InvalidArgument},
		{"too many", slices.Repeat([]string{"a=1"}, 17), codes.InvalidArgument},
	} {
		_, err := client.SetJoinConfig(ctx, &omniadapterv1.SetJoinConfigRequest{KernelArgs: tc.args})
		assert.Equal(t, tc.code, status.Code(err), "%s: %v", tc.name, err)

		got, ok := link.JoinArgs()
		assert.True(t, ok, tc.name)
		assert.Equal(t, join, got, "%s: a refused config leaves the last one", tc.name)
	}
}

func TestRedact(t *testing.T) {
	t.Parallel()

	assert.Equal(t, []string{"siderolink.api=grpc://omni:8090?jointoken=<redacted>", "talos.events.sink=[fdae::1]:8091"},
		omnilink.Redact([]string{"siderolink.api=grpc://omni:8090?jointoken=v2%3Asecret", "talos.events.sink=[fdae::1]:8091"}))
}

// TestAdapter: the provider runs the adapter with its flags and the provider socket, the
// key in its environment and never on its command line, starts it again when it exits,
// and stops it with the provider.
func TestAdapter(t *testing.T) {
	t.Parallel()

	dir := shortDir(t)
	record := filepath.Join(dir, "runs")
	bin := filepath.Join(dir, "omni-adapter")
	script := "#!/bin/sh\n" +
		"echo \"args: $*\" >> " + record + "\n" +
		"echo \"key: $OMNI_SERVICE_ACCOUNT_KEY\" >> " + record + "\n" +
		"exit 3\n"
	require.NoError(t, os.WriteFile(bin, []byte(script), 0o700))

	found, err := omnilink.FindBin(bin)
	require.NoError(t, err)
	assert.Equal(t, bin, found)

	_, err = omnilink.FindBin(filepath.Join(dir, "nonexistent"))
	require.Error(t, err)

	a := &omnilink.Adapter{Bin: bin, Args: []string{"--id", "anvil-test"}, ServiceAccountKey: "c2VjcmV0", Logger: zaptest.NewLogger(t)}
	link := omnilink.New(omnilink.Options{Socket: filepath.Join(dir, "omni-adapter.sock"), Logger: zaptest.NewLogger(t)})

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)

	go func() { done <- a.Run(ctx, link) }()

	// It exits at once; the provider starts it again, after a second.
	require.Eventually(t, func() bool {
		b, _ := os.ReadFile(record)

		return strings.Count(string(b), "args:") >= 2
	}, 20*time.Second, 50*time.Millisecond, "the adapter is started again")

	cancel()
	require.NoError(t, <-done)

	b, err := os.ReadFile(record)
	require.NoError(t, err)

	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		switch {
		case strings.HasPrefix(line, "args: "):
			assert.Equal(t, "args: --id anvil-test --provider-socket "+link.Socket(), line)
			assert.NotContains(t, line, "c2VjcmV0", "the key is never on the command line")
		case strings.HasPrefix(line, "key: "):
			assert.Equal(t, "key: c2VjcmV0", line, "the key is in the environment")
		}
	}
}
