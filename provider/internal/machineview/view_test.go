package machineview_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/provider/internal/machineview"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

func openState(t *testing.T) *resources.Store {
	t.Helper()

	st, err := resources.Open(t.Context(), t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })

	return st
}

// startView runs a view over st until the test ends and waits until it is ready.
func startView(t *testing.T, st *resources.Store) *machineview.View {
	t.Helper()

	return runView(t, machineview.New(), st)
}

// runView runs v over st until the test ends and waits until it is ready: for a view
// whose fields (Current, OnRestart) are set before Run.
func runView(t *testing.T, v *machineview.View, st *resources.Store) *machineview.View {
	t.Helper()

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)

	go func() { done <- v.Run(ctx, st) }()

	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})

	select {
	case <-v.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("the view never became ready")
	}

	return v
}

func TestViewFollowsState(t *testing.T) {
	t.Parallel()

	ctx := t.Context()

	st := openState(t)

	// A machine stored before the view starts is there once it is ready.
	m := resources.NewMachine("m1")
	m.TypedSpec().LastAddress = "10.0.0.5"
	require.NoError(t, st.Create(ctx, m))

	v := startView(t, st)

	require.NotNil(t, v.Get("m1"))
	assert.Equal(t, "10.0.0.5", v.Get("m1").Machine.LastAddress)
	assert.Nil(t, v.Get("m1").Intent)
	assert.Nil(t, v.Get("nope"))
	assert.Len(t, v.ByAddress("10.0.0.5"), 1)

	in := resources.NewMachineIntent("m1")
	in.TypedSpec().Acceptance = resources.AcceptanceAccepted
	require.NoError(t, st.Create(ctx, in))

	require.Eventually(t, func() bool {
		e := v.Get("m1")

		return e.Intent != nil && e.Intent.Acceptance == resources.AcceptanceAccepted && e.Machine != nil
	}, 5*time.Second, time.Millisecond)

	// The machine moves to another address: the index follows.
	_, err := safe.StateUpdateWithConflicts(ctx, st, m.Metadata(), func(m *resources.Machine) error {
		m.TypedSpec().LastAddress = "10.0.0.6"

		return nil
	})
	require.NoError(t, err)

	require.Eventually(t, func() bool { return len(v.ByAddress("10.0.0.6")) == 1 }, 5*time.Second, time.Millisecond)
	assert.Empty(t, v.ByAddress("10.0.0.5"))

	// Entries are immutable: what a reader holds does not change under it.
	held := v.Get("m1")

	require.NoError(t, st.Destroy(ctx, m.Metadata()))
	require.Eventually(t, func() bool { return v.Get("m1").Machine == nil }, 5*time.Second, time.Millisecond)
	assert.NotNil(t, held.Machine)
	assert.Empty(t, v.ByAddress("10.0.0.6"))

	require.NoError(t, st.Destroy(ctx, in.Metadata()))
	require.Eventually(t, func() bool { return v.Get("m1") == nil }, 5*time.Second, time.Millisecond)
}

func TestViewChanged(t *testing.T) {
	t.Parallel()

	ctx := t.Context()

	st := openState(t)

	v := startView(t, st)

	changed := v.Changed()

	select {
	case <-changed:
		t.Fatal("changed before any change")
	default:
	}

	require.NoError(t, st.Create(ctx, resources.NewMachine("m1")))

	select {
	case <-changed:
	case <-time.After(5 * time.Second):
		t.Fatal("no change signalled")
	}

	assert.NotNil(t, v.Get("m1"))
}

// TestAgentBootIssued: the newest agent token is known at once, ahead of the state.
func TestAgentBootIssued(t *testing.T) {
	t.Parallel()

	ctx := t.Context()

	st := openState(t)

	t0 := time.Unix(1700000000, 0)

	m := resources.NewMachine("m1")
	m.TypedSpec().AgentBootIssued = t0
	require.NoError(t, st.Create(ctx, m))

	v := startView(t, st)

	assert.True(t, v.AgentBootIssued("m1").Equal(t0), "the recorded one")
	assert.True(t, v.AgentBootIssued("nope").IsZero())

	v.NoteAgentBoot("m1", t0.Add(time.Second))
	v.NoteAgentBoot("m1", t0.Add(-time.Hour)) // an older note never wins
	assert.True(t, v.AgentBootIssued("m1").Equal(t0.Add(time.Second)))

	v.NoteAgentBoot("m2", t0)
	assert.True(t, v.AgentBootIssued("m2").Equal(t0), "known before the state knows the machine")
}

// TestNoteAgentBoot: the newest note wins, whatever the order the notes come in.
func TestNoteAgentBoot(t *testing.T) {
	t.Parallel()

	t0 := time.Unix(1700000000, 0)

	for _, tc := range []struct {
		name  string
		notes []time.Duration // after t0, in the order noted
		want  time.Duration
	}{
		{"one", []time.Duration{0}, 0},
		{"newer", []time.Duration{0, time.Second, 2 * time.Second}, 2 * time.Second},
		{"older after newer", []time.Duration{time.Second, 0, -time.Hour}, time.Second},
		{"the same again", []time.Duration{time.Second, time.Second}, time.Second},
		{"a nanosecond newer", []time.Duration{time.Second, time.Second + 1}, time.Second + 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			v := machineview.New()
			for _, d := range tc.notes {
				v.NoteAgentBoot("m1", t0.Add(d))
			}

			assert.True(t, v.AgentBootIssued("m1").Equal(t0.Add(tc.want)), "got %v", v.AgentBootIssued("m1"))
			assert.True(t, v.AgentBootIssued("m2").IsZero(), "another machine's notes are its own")
		})
	}
}

// TestNoteAgentBootConcurrently: notes racing each other leave the newest.
func TestNoteAgentBootConcurrently(t *testing.T) {
	t.Parallel()

	const writers, notes = 4, 1000

	v := machineview.New()
	t0 := time.Unix(1700000000, 0)
	done := make(chan struct{})

	for w := range writers {
		go func() {
			defer func() { done <- struct{}{} }()

			for i := range notes {
				id := fmt.Sprint("m", i%10)
				v.NoteAgentBoot(id, t0.Add(time.Duration(i*writers+w)))
				_ = v.AgentBootIssued(id)
			}
		}()
	}

	for range writers {
		<-done
	}

	for m := range 10 {
		// The last i for machine m is the largest i < notes with i%10 == m.
		last := notes - 10 + m
		want := t0.Add(time.Duration(last*writers + writers - 1))
		assert.True(t, v.AgentBootIssued(fmt.Sprint("m", m)).Equal(want), "m%d: %v", m, v.AgentBootIssued(fmt.Sprint("m", m)))
	}
}

// TestNoteAgentBootAllocations: once a machine has a note, noting again (every agent boot
// script does) and checking allocate nothing. Not parallel: AllocsPerRun counts every
// goroutine's allocations.
func TestNoteAgentBootAllocations(t *testing.T) {
	v := machineview.New()
	t0 := time.Unix(1700000000, 0)
	v.NoteAgentBoot("m1", t0)

	i := 0

	for _, tc := range []struct {
		name string
		do   func()
	}{
		{"newer", func() { i++; v.NoteAgentBoot("m1", t0.Add(time.Duration(i))) }},
		{"the same", func() { v.NoteAgentBoot("m1", t0) }},
		{"older", func() { v.NoteAgentBoot("m1", t0.Add(-time.Hour)) }},
		{"issued", func() { _ = v.AgentBootIssued("m1") }},
	} {
		assert.Zero(t, testing.AllocsPerRun(100, tc.do), tc.name)
	}
}

// TestViewSurvivesOverrun: a burst of writes larger than the state's event history,
// while the view is held back, overruns its watch; the view follows the state again
// from a fresh listing and converges — creations and deletions it missed included.
func TestViewSurvivesOverrun(t *testing.T) {
	t.Parallel()

	ctx := t.Context()

	st, err := resources.Open(ctx, t.TempDir(), resources.WithHistory(16))
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })

	gone := resources.NewMachine("gone")
	require.NoError(t, st.Create(ctx, gone))

	v := startView(t, st)
	require.Eventually(t, func() bool { return v.Get("gone") != nil }, 10*time.Second, time.Millisecond)

	release := v.Stall()

	const burst = 100 // six times the history

	for i := range burst {
		m := resources.NewMachine(fmt.Sprintf("m%03d", i))
		m.TypedSpec().LastAddress = fmt.Sprintf("10.0.%d.%d", i/250, i%250+1)
		require.NoError(t, st.Create(ctx, m))
	}

	require.NoError(t, st.Destroy(ctx, gone.Metadata()))

	in := resources.NewMachineIntent("m099")
	in.TypedSpec().Acceptance = resources.AcceptanceAccepted
	require.NoError(t, st.Create(ctx, in))

	release()

	require.Eventually(t, func() bool {
		for i := range burst {
			if v.Get(fmt.Sprintf("m%03d", i)) == nil {
				return false
			}
		}

		e := v.Get("m099")

		return v.Get("gone") == nil && e.Intent != nil && e.Intent.Acceptance == resources.AcceptanceAccepted
	}, 30*time.Second, 5*time.Millisecond, "the view did not converge")

	assert.GreaterOrEqual(t, v.Restarts(), int64(1), "the burst overran the watch")
	assert.Len(t, v.ByAddress("10.0.0.1"), 1)

	// It goes on following the state.
	require.NoError(t, st.Destroy(ctx, resources.NewMachine("m000").Metadata()))
	require.Eventually(t, func() bool { return v.Get("m000") == nil }, 10*time.Second, time.Millisecond)
}

// BenchmarkNoteAgentBoot is the note every agent boot script makes, and the check every
// agent session makes against it: their time and allocations.
func BenchmarkNoteAgentBoot(b *testing.B) {
	const fleet = 10000

	ids := make([]string, fleet)
	for i := range fleet {
		ids[i] = fmt.Sprintf("4c4c4544-0000-1000-8000-%012d", i)
	}

	t0 := time.Unix(1700000000, 0)

	for _, tc := range []struct {
		name string
		do   func(v *machineview.View, i int)
	}{
		// A machine in a boot loop: each token newer than the last.
		{"newer", func(v *machineview.View, i int) { v.NoteAgentBoot(ids[0], t0.Add(time.Duration(i))) }},
		// iPXE asking twice within a token's second: the same issue time again.
		{"same", func(v *machineview.View, _ int) { v.NoteAgentBoot(ids[0], t0) }},
		// A fleet booting its agents, each in turn.
		{"fleet", func(v *machineview.View, i int) { v.NoteAgentBoot(ids[i%fleet], t0.Add(time.Duration(i))) }},
		// The agent sessions' check.
		{"issued", func(v *machineview.View, i int) {
			if v.AgentBootIssued(ids[i%fleet]).IsZero() {
				b.Fatal("no agent boot noted")
			}
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			v := machineview.New()
			for i := range fleet {
				v.NoteAgentBoot(ids[i], t0)
			}

			b.ReportAllocs()

			i := 0
			for b.Loop() {
				i++
				tc.do(v, i)
			}
		})
	}
}

// A machine's Talos address is its newest: the map holds one address per machine.
func TestTalosAddress(t *testing.T) {
	t.Parallel()

	v := machineview.New()

	_, ok := v.TalosAt("fd77::5")
	assert.False(t, ok)

	v.NoteTalosAddress("fd77::5", "m1", "a1")
	v.NoteTalosAddress("fd77::6", "m2", "a2")

	got, ok := v.TalosAt("fd77::5")
	assert.True(t, ok)
	assert.Equal(t, machineview.TalosAddress{Machine: "m1", Allocation: "a1"}, got)

	v.NoteTalosAddress("fe80::1%br0", "m1", "a3")

	_, ok = v.TalosAt("fd77::5")
	assert.False(t, ok, "m1's previous address is forgotten")

	got, _ = v.TalosAt("fe80::1%br0")
	assert.Equal(t, machineview.TalosAddress{Machine: "m1", Allocation: "a3"}, got)

	got, ok = v.TalosAt("fd77::6")
	assert.True(t, ok, "another machine's stays")
	assert.Equal(t, machineview.TalosAddress{Machine: "m2", Allocation: "a2"}, got)
}
