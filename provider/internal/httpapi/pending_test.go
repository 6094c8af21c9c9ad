package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/controller/runtime"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/anvil-metal/anvil/provider/internal/controllers"
	"github.com/anvil-metal/anvil/provider/internal/lifecycle"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// TestMadeUpMachinesBounded: boot scripts asked for 10 times more made-up machine UUIDs
// than --max-pending-machines leave at most that many machines in the state and in the
// boot services' view; an accepted machine stays.
func TestMadeUpMachinesBounded(t *testing.T) {
	t.Parallel()

	const maxPending = 8

	f := newFixture(t)

	rt, err := runtime.NewRuntime(f.store, zaptest.NewLogger(t))
	require.NoError(t, err)
	require.NoError(t, rt.RegisterController(&controllers.MachineController{
		Observations: f.obs, AgentBoots: f.view.AgentBootIssued, MaxPending: maxPending, SweepInterval: 20 * time.Millisecond,
	}))

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)

	go func() { done <- rt.Run(ctx) }()

	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})

	f.machine(t, m1, "10.0.0.5", lifecycle.BootAgent, &resources.MachineIntentSpec{Acceptance: resources.AcceptanceAccepted, WipeID: "w1"}, nil)

	for i := range 10 * maxPending {
		code, body := f.get(t, bootURL(fmt.Sprintf("4c4c4544-0000-1000-8000-%012d", 100+i)))
		require.Equal(t, http.StatusOK, code, body)

		// As a fleet's boot scripts come: the controller keeps up.
		require.Eventually(t, func() bool { return len(f.obs) == 0 }, 5*time.Second, time.Millisecond)
	}

	time.Sleep(100 * time.Millisecond) // a sweep or two

	machines, err := safe.StateListAll[*resources.Machine](t.Context(), f.store)
	require.NoError(t, err)
	assert.LessOrEqual(t, machines.Len(), maxPending+1, "machines in the state")
	assert.LessOrEqual(t, len(f.view.All()), maxPending+1, "machines in the view")

	e := f.view.Get(m1)
	require.NotNil(t, e, "the accepted machine stays")
	assert.NotNil(t, e.Machine)
}
