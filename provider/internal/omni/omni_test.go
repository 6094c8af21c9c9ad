package omni_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/cosi-project/runtime/pkg/state/impl/inmem"
	"github.com/cosi-project/runtime/pkg/state/impl/namespaced"
	"github.com/siderolabs/omni/client/api/omni/specs"
	"github.com/siderolabs/omni/client/pkg/omni/resources/infra"
	omnires "github.com/siderolabs/omni/client/pkg/omni/resources/omni"
	"github.com/siderolabs/omni/client/pkg/omni/resources/siderolink"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/anvil-metal/anvil/provider/internal/omni"
	"github.com/anvil-metal/anvil/provider/internal/omnilink"
)

// TestConnection runs the connection against an in-memory state holding Omni's infra
// types, as Omni's API would serve them: the status is published as a static
// provider's, the health heartbeat is written, and the join config is followed.
func TestConnection(t *testing.T) {
	t.Parallel()

	st := state.WrapCore(namespaced.NewState(inmem.Build))
	core, logs := observer.New(zap.InfoLevel)

	c, err := omni.Dial(omni.Options{
		Endpoint: "https://omni.lab:8099", ProviderID: "anvil-test", Name: "Anvil", Description: "bare metal", Version: "v0.1.0",
		State: st, Logger: zap.New(core),
	})
	require.NoError(t, err)

	_, ok := c.JoinArgs()
	assert.False(t, ok, "no join config read yet")

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)

	go func() { done <- c.Run(ctx) }()

	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})

	require.Eventually(t, func() bool {
		ps, err := safe.StateGetByID[*infra.ProviderStatus](ctx, st, "anvil-test")
		if err != nil {
			return false
		}

		_, static := ps.Metadata().Labels().Get(omnires.LabelIsStaticInfraProvider)
		version, _ := ps.Metadata().Labels().Get(omni.LabelVersion)

		return static && version == "v0.1.0" && ps.TypedSpec().Value.GetName() == "Anvil" &&
			strings.Contains(ps.TypedSpec().Value.GetIcon(), "<svg")
	}, 10*time.Second, 10*time.Millisecond, "the provider status is published as a static provider's")

	require.Eventually(t, func() bool {
		hs, err := safe.StateGetByID[*infra.ProviderHealthStatus](ctx, st, "anvil-test")

		return err == nil && hs.TypedSpec().Value.GetLastHeartbeatTimestamp() != nil
	}, 10*time.Second, 10*time.Millisecond, "the health heartbeat is written")

	args := []string{
		"siderolink.api=grpc://10.77.0.3:8090?jointoken=v2:c2VjcmV0",
		"talos.events.sink=[fdae:41e4:649b:9303::1]:8091",
		"talos.logging.kernel=tcp://[fdae:41e4:649b:9303::1]:8092",
	}

	jc := siderolink.NewProviderJoinConfig("anvil-test")
	jc.TypedSpec().Value.JoinToken = "c2VjcmV0"
	jc.TypedSpec().Value.Config = &specs.JoinConfig{KernelArgs: args}
	require.NoError(t, st.Create(ctx, jc))

	require.Eventually(t, func() bool {
		got, ok := c.JoinArgs()

		return ok && assert.ObjectsAreEqual(args, got)
	}, 10*time.Second, 10*time.Millisecond, "the join config's kernel args are followed")

	// Omni rotates the join token: the new one is served.
	_, err = safe.StateUpdateWithConflicts(ctx, st, jc.Metadata(), func(r *siderolink.ProviderJoinConfig) error {
		r.TypedSpec().Value.Config.KernelArgs[0] = "siderolink.api=grpc://10.77.0.3:8090?jointoken=v2:bmV3"

		return nil
	})
	require.NoError(t, err)

	require.Eventually(t, func() bool {
		got, _ := c.JoinArgs()

		return len(got) == 3 && strings.HasSuffix(got[0], "v2:bmV3")
	}, 10*time.Second, 10*time.Millisecond)

	logged := false

	for _, e := range logs.All() {
		line := e.Message + " " + fmt.Sprint(e.ContextMap())
		assert.NotContains(t, line, "c2VjcmV0", "the join token is never logged")
		assert.NotContains(t, line, "bmV3", "the join token is never logged")

		logged = logged || strings.Contains(line, "talos.events.sink")
	}

	assert.True(t, logged, "the join config's arguments are logged, token redacted")
}

// TestDialNeedsAKey: without a service account key the provider cannot act as Omni's
// infra provider, and says so.
func TestDialNeedsAKey(t *testing.T) {
	t.Parallel()

	_, err := omni.Dial(omni.Options{Endpoint: "https://omni.lab:8099"})
	require.ErrorContains(t, err, "OMNI_SERVICE_ACCOUNT_KEY")

	_, err = omni.Dial(omni.Options{Endpoint: "not a url", ServiceAccountKey: "k"})
	require.ErrorContains(t, err, "is not a URL")
}

// TestJoinConfigReachesTheProvider: the adapter hands Omni's join config to the
// provider's end of the link, over its socket.
func TestJoinConfigReachesTheProvider(t *testing.T) {
	t.Parallel()

	dir, err := os.MkdirTemp("", "omni") // short: a socket path fits in 108 bytes
	require.NoError(t, err)

	t.Cleanup(func() { os.RemoveAll(dir) })

	link := omnilink.New(omnilink.Options{Socket: filepath.Join(dir, "omni-adapter.sock"), Logger: zap.NewNop()})
	st := state.WrapCore(namespaced.NewState(inmem.Build))

	c, err := omni.Dial(omni.Options{Endpoint: "https://omni.lab:8099", ProviderID: "anvil-test", State: st, ProviderSocket: link.Socket()})
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(t.Context())

	var wg sync.WaitGroup

	wg.Go(func() { link.Serve(ctx) }) //nolint:errcheck // nil when ctx ends
	wg.Go(func() { c.Run(ctx) })      //nolint:errcheck // nil when ctx ends

	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})

	jc := siderolink.NewProviderJoinConfig("anvil-test")
	docs := "apiVersion: v1alpha1\nkind: SideroLinkConfig\napiUrl: grpc://10.77.0.3:8090?jointoken=v2%3Ax\n"
	jc.TypedSpec().Value.Config = &specs.JoinConfig{KernelArgs: []string{"siderolink.api=grpc://10.77.0.3:8090?jointoken=v2%3Ax"}, Config: docs}
	require.NoError(t, st.Create(ctx, jc))

	require.Eventually(t, func() bool {
		got, ok := link.JoinArgs()
		config, _ := link.JoinConfig()

		return ok && len(got) == 1 && strings.HasSuffix(got[0], "v2%3Ax") && config == docs
	}, 20*time.Second, 10*time.Millisecond, "the provider has the join config: its args and its documents")
}
