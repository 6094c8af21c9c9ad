package agentapi_test

import (
	"context"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/controller/runtime"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/anvil-metal/anvil/internal/token"
	"github.com/anvil-metal/anvil/provider/internal/controllers"
	"github.com/anvil-metal/anvil/provider/internal/machineview"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// provider is the part of a provider that issues agent tokens and records them: the
// machine view the boot services note tokens in, and the machine controller that
// records them in the state.
type provider struct {
	view *machineview.View
	obs  chan controllers.PXEObservation
	stop func()
}

func startProvider(t *testing.T, store *resources.Store) *provider {
	t.Helper()

	p := &provider{view: machineview.New(), obs: make(chan controllers.PXEObservation)}

	rt, err := runtime.NewRuntime(store, zaptest.NewLogger(t))
	require.NoError(t, err)
	require.NoError(t, rt.RegisterController(&controllers.MachineController{Observations: p.obs, AgentBoots: p.view.AgentBootIssued}))

	ctx, cancel := context.WithCancel(context.Background())
	rtDone, viewDone := make(chan error, 1), make(chan error, 1)

	go func() { rtDone <- rt.Run(ctx) }()
	go func() { viewDone <- p.view.Run(ctx, store) }()

	<-p.view.Ready()

	p.stop = func() {
		cancel()
		require.NoError(t, <-rtDone)
		require.NoError(t, <-viewDone)
	}

	return p
}

// issue does what serving an agent boot script to the machine does with its token
// (httpapi's recordBoot): noted in the view at once, and observed when it is news.
func (p *provider) issue(t *testing.T, key []byte, id string, issued time.Time) string {
	t.Helper()

	p.view.NoteAgentBoot(id, issued)

	obs := controllers.PXEObservation{
		MachineID: id, UUID: id, MAC: "52:54:00:00:00:01", Arch: "amd64", Firmware: "uefi",
		Address: "10.0.0.5", Decision: "agent", At: issued, AgentIssued: issued,
	}

	var recorded *resources.MachineSpec
	if e := p.view.Get(id); e != nil {
		recorded = e.Machine
	}

	if obs.Changes(recorded) {
		p.obs <- obs
	}

	return token.Sign(key, token.Claims{Kind: token.KindAgent, MachineID: id, Issued: issued})
}

// TestSupersededTokenRefusedAfterRestart: a token superseded by the machine's next boot
// (seconds later) stays refused once the provider restarts on its state.
func TestSupersededTokenRefusedAfterRestart(t *testing.T) {
	t.Parallel()

	dir := t.TempDir()

	store, err := resources.Open(t.Context(), dir)
	require.NoError(t, err)

	p := startProvider(t, store)
	t0 := time.Now()

	tokA := p.issue(t, store.Keys().TokenKey(), machineID, t0)
	require.Eventually(t, func() bool {
		e := p.view.Get(machineID)

		return e != nil && e.Machine != nil
	}, 5*time.Second, time.Millisecond)

	// The machine boots again two seconds later: a new token supersedes A.
	tB := t0.Add(2 * time.Second)
	tokB := p.issue(t, store.Keys().TokenKey(), machineID, tB)

	assert.Eventually(t, func() bool {
		m, err := safe.StateGetByID[*resources.Machine](t.Context(), store, machineID)

		return err == nil && m.TypedSpec().AgentBootIssued.Equal(tB)
	}, 5*time.Second, 5*time.Millisecond, "the newest token's issue time is in the state")

	// The provider restarts on the same state.
	p.stop()
	require.NoError(t, store.Close())

	store, err = resources.Open(t.Context(), dir)
	require.NoError(t, err)
	t.Cleanup(func() { store.Close() })

	f := serveAgents(t, store, dir, "192.0.2.1")
	c := f.client(t)

	_, err = session(t.Context(), c, machineID, tokA)
	require.Equal(t, codes.Unauthenticated, status.Code(err), "the superseded token after the restart: %v", err)
	assert.Contains(t, status.Convert(err).Message(), "superseded")

	_, err = session(t.Context(), c, machineID, tokB)
	require.NoError(t, err, "the newest token is welcome")
}
