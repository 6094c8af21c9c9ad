package controllers_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

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
