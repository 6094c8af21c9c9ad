package controllers_test

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/provider/internal/boottrace"
	"github.com/anvil-metal/anvil/provider/internal/controllers"
	"github.com/anvil-metal/anvil/provider/internal/resources"
	"github.com/anvil-metal/anvil/provider/internal/transitions"
)

// syncLog records what the Omni controllers say of each change.
type syncLog struct {
	mu     sync.Mutex
	events []string
}

func (s *syncLog) Applied(id string, changed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()

	if changed {
		s.events = append(s.events, "applied changed "+id)
	} else {
		s.events = append(s.events, "applied unchanged "+id)
	}
}

func (s *syncLog) Reported(id string, _ time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()

	s.events = append(s.events, "reported "+id)
}

func (s *syncLog) saw(event string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()

	return slices.Contains(s.events, event)
}

func (s *syncLog) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()

	s.events = nil
}

// TestOmniSync: the Omni controllers say when Omni's view of a machine is applied to
// its intent, whether that changed it, and when its Omni status is stored.
func TestOmniSync(t *testing.T) {
	t.Parallel()

	applier := &lateApplier{}
	log := &syncLog{}
	status := controllers.NewMachineStatusController()
	st := run(t, status,
		&controllers.OmniIntentController{Applier: applier, Recorder: status, Sync: log},
		&controllers.OmniMachineStatusController{Sync: log})
	applier.tr.Store(transitions.New(st, transitions.Options{ManagedBy: "Omni at https://omni.test"}).Owner())

	ctx := t.Context()
	id := "4c4c4544-0000-1000-8000-000000000043"

	require.NoError(t, st.Create(ctx, resources.NewMachine(id)))

	om := resources.NewOmniMachine(id)
	om.TypedSpec().Acceptance = resources.AcceptanceAccepted
	om.TypedSpec().PreferredPower = resources.PowerOff
	require.NoError(t, st.Create(ctx, om))

	require.Eventually(t, func() bool { return log.saw("applied changed "+id) && log.saw("reported "+id) }, 10*time.Second, 10*time.Millisecond)

	// What Omni changed that the intent does not carry leaves it as it was.
	log.reset()

	_, err := safe.StateUpdateWithConflicts(ctx, st, om.Metadata(), func(om *resources.OmniMachine) error {
		om.TypedSpec().NodeUniqueToken = "t1"

		return nil
	})
	require.NoError(t, err)

	require.Eventually(t, func() bool { return log.saw("applied unchanged "+id) && log.saw("reported "+id) }, 10*time.Second, 10*time.Millisecond)
	assert.False(t, log.saw("applied changed "+id))
}

// Every install recorded is marked on the machine's boot timeline, whoever said it.
func TestInstallsAreTraced(t *testing.T) {
	t.Parallel()

	ctrl := controllers.NewMachineStatusController()
	ctrl.Trace = boottrace.New(nil)
	run(t, ctrl)

	ctrl.Trace.Mark("m1", boottrace.PhaseHandoff, "uefi", "ipxe")
	require.NoError(t, ctrl.RecordInstalled(t.Context(), "m1", "a1", "manual"))

	marks := ctrl.Trace.Timeline("m1")
	require.Len(t, marks, 2)
	assert.Equal(t, boottrace.PhaseInstalled, marks[1].Phase)
	assert.Equal(t, "manual", marks[1].Detail)
}
