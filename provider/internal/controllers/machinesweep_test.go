package controllers_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/provider/internal/controllers"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// issuedTokens stands for the boot services' record of the agent tokens they issued.
type issuedTokens struct {
	mu     sync.Mutex
	newest map[string]time.Time
}

func (i *issuedTokens) note(id string, at time.Time) {
	i.mu.Lock()
	defer i.mu.Unlock()

	i.newest[id] = at
}

func (i *issuedTokens) AgentBootIssued(id string) time.Time {
	i.mu.Lock()
	defer i.mu.Unlock()

	return i.newest[id]
}

// TestSweepRecordsDroppedAgentToken: a token whose observation never reached the
// controller (the boot services' queue was full) is recorded by the sweep.
func TestSweepRecordsDroppedAgentToken(t *testing.T) {
	t.Parallel()

	tokens := &issuedTokens{newest: map[string]time.Time{}}
	obs := make(chan controllers.PXEObservation)
	st := run(t, &controllers.MachineController{Observations: obs, AgentBoots: tokens.AgentBootIssued, SweepInterval: 20 * time.Millisecond})

	t0 := time.Now()
	tokens.note("m1", t0)
	obs <- controllers.PXEObservation{MachineID: "m1", UUID: "m1", MAC: "52:54:00:00:00:01", Decision: "agent", At: t0, AgentIssued: t0}

	eventually(t, st, "m1", func(m *resources.Machine) bool { return m.TypedSpec().AgentBootIssued.Equal(t0) })

	// The next boot's token is issued; its observation is dropped.
	t1 := t0.Add(time.Second)
	tokens.note("m1", t1)

	m := eventually(t, st, "m1", func(m *resources.Machine) bool { return m.TypedSpec().AgentBootIssued.Equal(t1) })
	assert.Equal(t, []string{"52:54:00:00:00:01"}, m.TypedSpec().MACs, "only the token's time changed")
}

// TestRecordTakesNewestAgentToken: observations queued for one machine are written as
// the newest token the boot services issued, once.
func TestRecordTakesNewestAgentToken(t *testing.T) {
	t.Parallel()

	tokens := &issuedTokens{newest: map[string]time.Time{}}
	obs := make(chan controllers.PXEObservation)
	st := run(t, &controllers.MachineController{Observations: obs, AgentBoots: tokens.AgentBootIssued, SweepInterval: time.Hour})

	t0 := time.Now()
	tokens.note("m1", t0.Add(time.Minute))
	obs <- controllers.PXEObservation{MachineID: "m1", UUID: "m1", MAC: "52:54:00:00:00:01", Decision: "agent", At: t0, AgentIssued: t0}

	m := eventually(t, st, "m1", func(m *resources.Machine) bool { return !m.TypedSpec().AgentBootIssued.IsZero() })
	assert.True(t, m.TypedSpec().AgentBootIssued.Equal(t0.Add(time.Minute)), "the newest: %v", m.TypedSpec().AgentBootIssued)
}

// madeUp is a boot script's observation of a machine nobody has.
func madeUp(i int, at time.Time) controllers.PXEObservation {
	id := fmt.Sprintf("00000000-0000-4000-8000-%012d", i)

	return controllers.PXEObservation{MachineID: id, UUID: id, MAC: "52:54:00:00:00:01", Arch: "amd64", Firmware: "uefi", Address: "10.0.0.9", Decision: "agent", At: at, AgentIssued: at}
}

// unregistered counts the machines recorded from boot scripts alone.
func unregistered(t *testing.T, st state.State) int {
	t.Helper()

	machines, err := safe.StateListAll[*resources.Machine](t.Context(), st)
	require.NoError(t, err)

	n := 0

	for m := range machines.All() {
		if _, err := safe.StateGetByID[*resources.MachineIntent](t.Context(), st, m.Metadata().ID()); state.IsNotFoundError(err) && m.TypedSpec().AgentRegistered.IsZero() {
			n++
		}
	}

	return n
}

// TestPendingMachinesBounded: boot scripts for 10 times more made-up machines than
// MaxPending record at most MaxPending of them; an accepted machine and one whose agent
// registered stay, and an agent registering past the bound is recorded.
func TestPendingMachinesBounded(t *testing.T) {
	t.Parallel()

	const maxPending = 16

	obs := make(chan controllers.PXEObservation)
	st := run(t, &controllers.MachineController{Observations: obs, MaxPending: maxPending, SweepInterval: 20 * time.Millisecond})
	now := time.Now()

	// An accepted machine: recorded from its boot, then accepted.
	accepted := madeUp(-1, now)
	accepted.MachineID, accepted.UUID = "accepted", "accepted"
	obs <- accepted

	eventually(t, st, "accepted", func(*resources.Machine) bool { return true })

	in := resources.NewMachineIntent("accepted")
	in.TypedSpec().Acceptance = resources.AcceptanceAccepted
	require.NoError(t, st.Create(t.Context(), in))

	// A machine whose agent registered.
	obs <- controllers.PXEObservation{MachineID: "registered", MAC: "52:54:00:00:00:02", Address: "10.0.0.8", Decision: "agent", At: now, Registered: true}

	for i := range 10 * maxPending {
		obs <- madeUp(i, now)
	}

	// One more, registered, past the bound: a real machine is not lost.
	obs <- controllers.PXEObservation{MachineID: "late", MAC: "52:54:00:00:00:03", Address: "10.0.0.7", Decision: "agent", At: now, Registered: true}

	m := eventually(t, st, "late", func(*resources.Machine) bool { return true })
	assert.False(t, m.TypedSpec().AgentRegistered.IsZero())

	assert.LessOrEqual(t, unregistered(t, st), maxPending)

	machines, err := safe.StateListAll[*resources.Machine](t.Context(), st)
	require.NoError(t, err)
	assert.LessOrEqual(t, machines.Len(), maxPending+3, "the made-up machines recorded, the accepted, the registered ones")

	for _, id := range []string{"accepted", "registered"} {
		_, err := safe.StateGetByID[*resources.Machine](t.Context(), st, id)
		assert.NoError(t, err, id)
	}
}

// TestPendingMachinesForgotten: a machine recorded from boot scripts alone is forgotten
// once unseen for PendingTTL; one a person decided of, one with a BMC or an inventory,
// one whose agent registered stay.
func TestPendingMachinesForgotten(t *testing.T) {
	t.Parallel()

	obs := make(chan controllers.PXEObservation)
	st := run(t, &controllers.MachineController{Observations: obs, PendingTTL: time.Second, SweepInterval: 20 * time.Millisecond})
	now := time.Now()

	ids := []string{"made-up", "rejected", "bmc", "inventoried"}
	for i, id := range ids {
		o := madeUp(i, now)
		o.MachineID, o.UUID = id, id
		obs <- o
	}

	obs <- controllers.PXEObservation{MachineID: "registered", MAC: "52:54:00:00:00:02", Address: "10.0.0.8", Decision: "agent", At: now, Registered: true}

	for _, id := range append(ids, "registered") {
		eventually(t, st, id, func(*resources.Machine) bool { return true })
	}

	in := resources.NewMachineIntent("rejected")
	in.TypedSpec().Acceptance = resources.AcceptanceRejected
	require.NoError(t, st.Create(t.Context(), in))
	require.NoError(t, st.Create(t.Context(), resources.NewBMCConfig("bmc")))
	require.NoError(t, st.Create(t.Context(), resources.NewMachineInventory("inventoried")))

	require.Eventually(t, func() bool {
		_, err := safe.StateGetByID[*resources.Machine](t.Context(), st, "made-up")

		return state.IsNotFoundError(err)
	}, 10*time.Second, 10*time.Millisecond, "the made-up machine is forgotten")

	// Long past its time, the rest stay.
	time.Sleep(1200 * time.Millisecond)

	for _, id := range []string{"rejected", "bmc", "inventoried", "registered"} {
		_, err := safe.StateGetByID[*resources.Machine](t.Context(), st, id)
		assert.NoError(t, err, id)
	}
}
