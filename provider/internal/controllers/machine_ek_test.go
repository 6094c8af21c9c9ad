package controllers_test

import (
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/provider/internal/controllers"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// TestMachineControllerEK: the first EK proven for a machine is recorded and stays; a
// second one is refused, never recorded over it, and boots leave it alone.
func TestMachineControllerEK(t *testing.T) {
	t.Parallel()

	obs := make(chan controllers.PXEObservation)
	ctrl := &controllers.MachineController{Observations: obs, Labels: map[string]string{"dc": "nyc"}}
	st := run(t, ctrl)

	const first, second = "sha256:" + "aa", "sha256:" + "bb"

	// An agent that proved its EK before its machine's boot was recorded: the machine is
	// recorded with it. RecordEK returns once it is stored.
	require.NoError(t, ctrl.RecordEK(t.Context(), "m1", first))

	m, err := safe.StateGetByID[*resources.Machine](t.Context(), st, "m1")
	require.NoError(t, err)
	assert.Equal(t, first, m.TypedSpec().EK)
	assert.False(t, m.TypedSpec().EKRecordedAt.IsZero())
	assert.False(t, m.TypedSpec().FirstSeen.IsZero())

	label, _ := m.Metadata().Labels().Get("dc")
	assert.Equal(t, "nyc", label)

	version := m.Metadata().Version()

	// The same EK again (every session of the machine) changes nothing.
	require.NoError(t, ctrl.RecordEK(t.Context(), "m1", first))

	// Another EK is refused, and the first stays.
	assert.ErrorIs(t, ctrl.RecordEK(t.Context(), "m1", second), controllers.ErrOtherEK)

	m, err = safe.StateGetByID[*resources.Machine](t.Context(), st, "m1")
	require.NoError(t, err)
	assert.Equal(t, first, m.TypedSpec().EK)
	assert.Equal(t, version.String(), m.Metadata().Version().String(), "neither the same EK nor another was written")

	// A boot of the machine keeps its EK.
	obs <- controllers.PXEObservation{MachineID: "m1", UUID: "m1", MAC: "52:54:00:00:00:01", Arch: "amd64", Decision: "agent", At: time.Now()}

	m = eventually(t, st, "m1", func(m *resources.Machine) bool { return m.TypedSpec().Arch == "amd64" })
	assert.Equal(t, first, m.TypedSpec().EK)
}
