package controllers_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/provider/internal/controllers"
	"github.com/anvil-metal/anvil/provider/internal/resources"
	"github.com/anvil-metal/anvil/provider/internal/transitions"
)

// TestOmniIntentController: Omni's view of a machine becomes its intent through the
// transitions' owner view, also when Omni knew the machine before the provider did;
// every change of Omni's view is carried out; the local view keeps refusing what Omni
// owns.
func TestOmniIntentController(t *testing.T) {
	t.Parallel()

	// The transitions need the runtime's state: wire them once it exists.
	applier := &lateApplier{}
	status := controllers.NewMachineStatusController()
	st := run(t, status, &controllers.OmniIntentController{Applier: applier, Recorder: status})
	local := transitions.New(st, transitions.Options{ManagedBy: "Omni at https://omni.test"})
	applier.tr.Store(local.Owner())

	ctx := t.Context()
	id := "4c4c4544-0000-1000-8000-000000000042"

	// Omni first: an accepted machine the provider has not seen yet.
	om := resources.NewOmniMachine(id)
	om.TypedSpec().Acceptance = resources.AcceptanceAccepted
	om.TypedSpec().PreferredPower = resources.PowerOff
	require.NoError(t, st.Create(ctx, om))

	m := resources.NewMachine(id)
	m.TypedSpec().Arch = "amd64"
	require.NoError(t, st.Create(ctx, m))

	eventually(t, st, id, func(in *resources.MachineIntent) bool {
		return in.TypedSpec().Acceptance == resources.AcceptanceAccepted && in.TypedSpec().WipeID == "omni:initial" &&
			in.TypedSpec().IdlePower == resources.PowerOff
	})

	// A cluster takes it.
	_, err := safe.StateUpdateWithConflicts(ctx, st, om.Metadata(), func(om *resources.OmniMachine) error {
		om.TypedSpec().ClusterTalosVersion = "v1.9.0"
		om.TypedSpec().PreferredPower = resources.PowerOn

		return nil
	})
	require.NoError(t, err)

	in := eventually(t, st, id, func(in *resources.MachineIntent) bool {
		return in.TypedSpec().Allocation != nil && in.TypedSpec().IdlePower == resources.PowerOn
	})
	assert.Equal(t, "v1.9.0", in.TypedSpec().Allocation.TalosVersion)

	// Talos installs itself and tells Omni, which counts it: the allocation is installed.
	_, err = safe.StateUpdateWithConflicts(ctx, st, om.Metadata(), func(om *resources.OmniMachine) error {
		om.TypedSpec().InstallEventID = 1

		return nil
	})
	require.NoError(t, err)

	ms := eventually(t, st, id, func(ms *resources.MachineStatus) bool {
		return ms.TypedSpec().InstalledAllocation == in.TypedSpec().Allocation.ID
	})
	assert.Equal(t, controllers.InstalledByOmni, ms.TypedSpec().InstalledBy)

	// The cluster is deleted: Omni names a new wipe.
	_, err = safe.StateUpdateWithConflicts(ctx, st, om.Metadata(), func(om *resources.OmniMachine) error {
		om.TypedSpec().ClusterTalosVersion = ""
		om.TypedSpec().PreferredPower = resources.PowerOff
		om.TypedSpec().WipeID = "w1"

		return nil
	})
	require.NoError(t, err)

	eventually(t, st, id, func(in *resources.MachineIntent) bool {
		return in.TypedSpec().Allocation == nil && in.TypedSpec().WipeID == "omni:w1" && in.TypedSpec().RebootID == "omni:wipe=w1"
	})

	_, err = local.Reject(ctx, id)
	assert.Equal(t, transitions.CodeManaged, transitions.CodeOf(err), "the local control refuses what Omni owns")
}

// lateApplier hands the controller the transitions once the test has made them.
type lateApplier struct {
	tr atomic.Pointer[transitions.Service]
}

func (a *lateApplier) ApplyOmni(ctx context.Context, id string, o resources.OmniMachineSpec) (*resources.MachineIntentSpec, error) {
	return a.tr.Load().ApplyOmni(ctx, id, o)
}
