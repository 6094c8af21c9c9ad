package session_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/anvil-metal/anvil/agent/internal/orders"
	"github.com/anvil-metal/anvil/agent/internal/session"
	"github.com/anvil-metal/anvil/internal/testprovider"
	"github.com/anvil-metal/anvil/internal/tpmid/softtpm"
)

// TestAgentTPMIdentity drives the identity proof against the real provider: an agent with
// a TPM (done in software) answers the provider's challenge and registers, and the
// provider records its EK (the machine's identity tpm); an agent showing another TPM for
// the same machine, with the same token, is refused, raises the security event and does
// not replace the first EK.
func TestAgentTPMIdentity(t *testing.T) {
	t.Parallel()

	p := testprovider.New(t, true)
	p.Start()

	cfg := agentConfig(t, p)
	m := &machine{wipeGate: make(chan struct{})}
	machineTPM := softtpm.MustNew()

	var registrations atomic.Int32

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)

	go func() {
		done <- session.Run(ctx, session.Options{
			Config: cfg, BootID: "boot-1", AgentVersion: "test", Identity: machineTPM, Inventory: inventory(t),
			Executor: orders.New(m, zaptest.NewLogger(t)), Logger: zaptest.NewLogger(t).Named("session"),
			OnRegistered: func() { registrations.Add(1) },
		})
	}()

	require.Eventually(t, func() bool { return registrations.Load() == 1 }, 30*time.Second, 10*time.Millisecond)

	p.WaitMachine(uuid)
	require.Eventually(t, func() bool {
		out, err := p.Anvilctl("get", "machine", uuid, "-o", "yaml")

		return err == nil && strings.Contains(out, "ek: "+machineTPM.Fingerprint()) && strings.Contains(out, "anvil.dev/identity: tpm")
	}, 30*time.Second, 100*time.Millisecond, "the EK and the identity label: %s", p.MustAnvilctl("get", "machine", uuid, "-o", "yaml"))

	cancel()
	<-done //nolint:errcheck // ends with ctx

	// Another TPM, the machine's token.
	var refused atomic.Bool

	sctx, scancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer scancel()

	go session.Run(sctx, session.Options{ //nolint:errcheck // refused, then ended by the test
		Config: cfg, Identity: softtpm.MustNew(), Executor: orders.New(m, zaptest.NewLogger(t)), Logger: zaptest.NewLogger(t),
		OnClosed: func(err error) {
			if status.Code(err) == codes.Unauthenticated {
				refused.Store(true)
				scancel()
			}
		},
	})

	require.Eventually(t, refused.Load, 20*time.Second, 10*time.Millisecond, "another TPM is refused")
	require.Eventually(t, func() bool {
		log := p.Log()

		return strings.Contains(log, "agent refused: TPM identity not proven") && strings.Contains(log, "identity-mismatch")
	}, 10*time.Second, 100*time.Millisecond)

	assert.Contains(t, p.MustAnvilctl("get", "machine", uuid, "-o", "yaml"), "ek: "+machineTPM.Fingerprint(), "the first EK stays")
}
