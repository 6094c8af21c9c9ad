package controllers_test

import (
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/provider/internal/controllers"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

func TestMachineLabelsController(t *testing.T) {
	t.Parallel()

	st := run(t, &controllers.MachineLabelsController{Static: map[string]string{"dc": "nyc", "rack": "r1"}})
	ctx := t.Context()

	m := resources.NewMachine("m1")
	m.TypedSpec().Arch = "amd64"
	require.NoError(t, st.Create(ctx, m))

	// Booted, no inventory yet: static labels and arch.
	ml := eventually(t, st, "m1", func(ml *resources.MachineLabels) bool { return true })
	assert.Equal(t, map[string]string{"dc": "nyc", "rack": "r1", controllers.LabelArch: "amd64"}, ml.Metadata().Labels().Raw())
	assert.False(t, ml.TypedSpec().FromInventory)

	// The inventory comes in: the hardware's labels join.
	inv := resources.NewMachineInventory("m1")
	inv.TypedSpec().System.Manufacturer = "Supermicro"
	inv.TypedSpec().MemoryMiB = 32 * 1024
	inv.TypedSpec().Disks = []resources.DiskInventory{{Name: "sda", Size: 1e12}}
	require.NoError(t, st.Create(ctx, inv))

	ml = eventually(t, st, "m1", func(ml *resources.MachineLabels) bool { return ml.TypedSpec().FromInventory })
	assert.Equal(t, map[string]string{
		"dc": "nyc", "rack": "r1", controllers.LabelArch: "amd64", controllers.LabelVendor: "supermicro",
		controllers.LabelMemoryClass: "32gib", controllers.LabelDiskCount: "1", controllers.LabelDiskType: "ssd",
		controllers.LabelIdentity: "none",
	}, ml.Metadata().Labels().Raw())

	// The user's labels: one new, one overriding a static label.
	in := resources.NewMachineIntent("m1")
	in.TypedSpec().Labels = map[string]string{"team": "storage", "rack": "r9"}
	require.NoError(t, st.Create(ctx, in))

	ml = eventually(t, st, "m1", func(ml *resources.MachineLabels) bool {
		_, ok := ml.Metadata().Labels().Get("team")

		return ok
	})
	rack, _ := ml.Metadata().Labels().Get("rack")
	assert.Equal(t, "r9", rack)
	assert.Equal(t, map[string]string{"team": "storage", "rack": "r9"}, ml.TypedSpec().User)
	assert.Equal(t, map[string]string{"dc": "nyc", "rack": "r1"}, ml.TypedSpec().Static)

	// Removed again: the static value is back, the user's label is gone.
	_, err := safe.StateUpdateWithConflicts(ctx, st, in.Metadata(), func(in *resources.MachineIntent) error {
		in.TypedSpec().Labels = nil

		return nil
	})
	require.NoError(t, err)

	ml = eventually(t, st, "m1", func(ml *resources.MachineLabels) bool {
		_, ok := ml.Metadata().Labels().Get("team")

		return !ok
	})
	rack, _ = ml.Metadata().Labels().Get("rack")
	assert.Equal(t, "r1", rack)

	// Selectors match the effective labels through the state's own label queries.
	q, err := resources.ParseSelector("dc=nyc," + controllers.LabelVendor + " in (supermicro,dell-inc),!team")
	require.NoError(t, err)

	list, err := safe.StateListAll[*resources.MachineLabels](ctx, st, state.WithLabelQuery(resource.RawLabelQuery(q)))
	require.NoError(t, err)
	assert.Equal(t, 1, list.Len())

	// The machine goes: its labels go.
	require.NoError(t, st.Destroy(ctx, m.Metadata()))

	require.Eventually(t, func() bool {
		_, err := safe.StateGetByID[*resources.MachineLabels](ctx, st, "m1")

		return state.IsNotFoundError(err)
	}, 10*time.Second, 10*time.Millisecond)
}
