package machineview_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/provider/internal/machineview"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// TestAgentBootsBounded: boot scripts for 10 times more made-up machines than the notes
// held leave the notes bounded, and the newest note is held.
func TestAgentBootsBounded(t *testing.T) {
	t.Parallel()

	v := machineview.New()
	t0 := time.Unix(1700000000, 0)

	for i := range 10 * machineview.MaxAgentBoots {
		v.NoteAgentBoot(fmt.Sprintf("made-up-%d", i), t0.Add(time.Duration(i)*time.Millisecond))
	}

	assert.LessOrEqual(t, v.AgentBootsNoted(), machineview.MaxAgentBoots)

	// A real machine's boot script right after the flood: its note is held.
	last := t0.Add(time.Duration(10*machineview.MaxAgentBoots) * time.Millisecond)
	v.NoteAgentBoot("m1", last)
	assert.True(t, v.AgentBootIssued("m1").Equal(last), "the newest note is held")
	assert.LessOrEqual(t, v.AgentBootsNoted(), machineview.MaxAgentBoots)

	// An hour later the full map drops every note older than the state needs to record
	// it, rather than one at a time.
	v.NoteAgentBoot("m2", last.Add(time.Hour))
	assert.Equal(t, 1, v.AgentBootsNoted(), "only the recent note is left")
	assert.True(t, v.AgentBootIssued("m2").Equal(last.Add(time.Hour)))
}

// TestAgentBootRecorded: a note goes once the state records the token (or a newer one);
// the token it said is still the newest known.
func TestAgentBootRecorded(t *testing.T) {
	t.Parallel()

	st := openState(t)
	v := startView(t, st)
	t0 := time.Unix(1700000000, 0)

	v.NoteAgentBoot("m1", t0)
	v.NoteAgentBoot("m2", t0.Add(time.Second))
	require.Equal(t, 2, v.AgentBootsNoted())

	m := resources.NewMachine("m1")
	m.TypedSpec().AgentBootIssued = t0
	require.NoError(t, st.Create(t.Context(), m))

	// m2's record is older than its note: the note stays.
	m2 := resources.NewMachine("m2")
	m2.TypedSpec().AgentBootIssued = t0
	require.NoError(t, st.Create(t.Context(), m2))

	require.Eventually(t, func() bool { return v.Get("m2") != nil && v.AgentBootsNoted() == 1 }, 5*time.Second, time.Millisecond)
	assert.True(t, v.AgentBootIssued("m1").Equal(t0))
	assert.True(t, v.AgentBootIssued("m2").Equal(t0.Add(time.Second)))

	// Forgotten: its note goes with it.
	require.NoError(t, st.Destroy(t.Context(), m2.Metadata()))
	require.Eventually(t, func() bool { return v.AgentBootsNoted() == 0 }, 5*time.Second, time.Millisecond)
}
