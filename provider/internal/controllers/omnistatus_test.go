package controllers_test

import (
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/provider/internal/controllers"
	"github.com/anvil-metal/anvil/provider/internal/lifecycle"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// TestOmniStatus: what Anvil reports to Omni of a machine, row by row.
func TestOmniStatus(t *testing.T) {
	t.Parallel()

	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	alloc := &resources.Allocation{ID: "a1", TalosVersion: "v1.9.0"}
	p := lifecycle.Policy{ProvisionBMC: true}
	userBMC := &resources.BMCConfigSpec{Kind: "ipmi", Address: "10.0.0.5", Username: "admin"}

	machine := func(intent resources.MachineIntentSpec, status resources.MachineStatusSpec, bmc *resources.BMCConfigSpec) lifecycle.Machine {
		return lifecycle.Machine{ID: "m", Machine: &resources.MachineSpec{}, Intent: &intent, Status: &status, BMC: bmc}
	}

	accepted := resources.MachineIntentSpec{Acceptance: resources.AcceptanceAccepted, WipeID: "omni:initial"}
	wiped := resources.MachineStatusSpec{WipedID: "omni:initial", LastWipe: &resources.WipeRecord{ID: "omni:initial", OmniNodeUniqueToken: "tok-1"}}

	for _, tc := range []struct {
		name  string
		om    resources.OmniMachineSpec
		m     lifecycle.Machine
		power *resources.PowerStatusSpec
		want  resources.OmniMachineStatusSpec
	}{
		{
			name: "pending: nothing known of its power",
			m:    machine(resources.MachineIntentSpec{Acceptance: resources.AcceptancePending}, resources.MachineStatusSpec{}, nil),
			want: resources.OmniMachineStatusSpec{Power: resources.PowerUnknown},
		},
		{
			name:  "accepted, wipe owed: not ready",
			m:     machine(accepted, resources.MachineStatusSpec{}, userBMC),
			power: &resources.PowerStatusSpec{State: resources.PowerOn},
			want:  resources.OmniMachineStatusSpec{Power: resources.PowerOn},
		},
		{
			name:  "wiped, BMC provisioning owed: not ready",
			m:     machine(accepted, wiped, nil),
			power: &resources.PowerStatusSpec{State: resources.PowerOn},
			want:  resources.OmniMachineStatusSpec{Power: resources.PowerOn, WipedNodeUniqueToken: "tok-1"},
		},
		{
			name:  "wiped, BMC given: ready, its voided token reported",
			m:     machine(accepted, wiped, userBMC),
			power: &resources.PowerStatusSpec{State: resources.PowerOff},
			want:  resources.OmniMachineStatusSpec{Power: resources.PowerOff, ReadyToUse: true, WipedNodeUniqueToken: "tok-1"},
		},
		{
			name: "installed under a local allocation: not Omni's to use",
			m: func() lifecycle.Machine {
				in := accepted
				in.Allocation = alloc
				st := wiped
				st.InstalledAllocation = alloc.ID

				return machine(in, st, userBMC)
			}(),
			power: &resources.PowerStatusSpec{State: resources.PowerOn},
			want:  resources.OmniMachineStatusSpec{Power: resources.PowerOn, Installed: true, WipedNodeUniqueToken: "tok-1"},
		},
		{
			name: "installed in Omni's cluster: ready to use, as Omni's config apply wants",
			m: func() lifecycle.Machine {
				in := accepted
				in.Allocation = &resources.Allocation{ID: "omni-1", TalosVersion: "v1.9.0"}
				st := wiped
				st.InstalledAllocation = "omni-1"

				return machine(in, st, userBMC)
			}(),
			power: &resources.PowerStatusSpec{State: resources.PowerOn},
			want:  resources.OmniMachineStatusSpec{Power: resources.PowerOn, Installed: true, ReadyToUse: true, WipedNodeUniqueToken: "tok-1"},
		},
		{
			name:  "Omni's reboot carried out",
			m:     machine(accepted, wiped, userBMC),
			power: &resources.PowerStatusSpec{State: resources.PowerOn, RebootID: "omni:reboot=r1,wipe=w1", LastActionAt: at},
			want: resources.OmniMachineStatusSpec{
				Power: resources.PowerOn, ReadyToUse: true, LastRebootID: "r1", LastRebootAt: at, WipedNodeUniqueToken: "tok-1",
			},
		},
		{
			name:  "a reboot of the local control is not Omni's",
			m:     machine(accepted, wiped, userBMC),
			power: &resources.PowerStatusSpec{State: resources.PowerOn, RebootID: "0123abcd", LastActionAt: at},
			want:  resources.OmniMachineStatusSpec{Power: resources.PowerOn, ReadyToUse: true, WipedNodeUniqueToken: "tok-1"},
		},
		{
			name:  "a power-off request, the machine not off yet",
			om:    resources.OmniMachineSpec{PowerOffRequestID: "p1"},
			m:     machine(accepted, wiped, userBMC),
			power: &resources.PowerStatusSpec{State: resources.PowerOn},
			want:  resources.OmniMachineStatusSpec{Power: resources.PowerOn, ReadyToUse: true, WipedNodeUniqueToken: "tok-1"},
		},
		{
			name:  "a power-off request carried out",
			om:    resources.OmniMachineSpec{PowerOffRequestID: "p1"},
			m:     machine(accepted, wiped, userBMC),
			power: &resources.PowerStatusSpec{State: resources.PowerOff},
			want:  resources.OmniMachineStatusSpec{Power: resources.PowerOff, ReadyToUse: true, LastPowerOffID: "p1", WipedNodeUniqueToken: "tok-1"},
		},
	} {
		assert.Equal(t, tc.want, controllers.OmniStatus(tc.om, tc.m, tc.power, nil, p), tc.name)
	}

	labels := map[string]string{"rack": "r1", "anvil.dev/vendor": "dell-inc"}
	got := controllers.OmniStatus(resources.OmniMachineSpec{}, machine(accepted, wiped, userBMC), nil, labels, p)
	assert.Equal(t, labels, got.Labels)

	labels["rack"] = "r2"
	assert.Equal(t, "r1", got.Labels["rack"], "the labels are the status's own copy")
}

// TestOmniMachineStatusController: a machine Omni has gets its Omni status, which follows
// its labels and power, and goes with Omni's view of it.
func TestOmniMachineStatusController(t *testing.T) {
	t.Parallel()

	st := run(t, &controllers.OmniMachineStatusController{Policy: lifecycle.Policy{}})
	ctx := t.Context()
	id := "4c4c4544-0000-1000-8000-000000000043"

	m := resources.NewMachine(id)
	require.NoError(t, st.Create(ctx, m))

	in := resources.NewMachineIntent(id)
	in.TypedSpec().Acceptance = resources.AcceptanceAccepted
	require.NoError(t, st.Create(ctx, in))

	om := resources.NewOmniMachine(id)
	om.TypedSpec().Acceptance = resources.AcceptanceAccepted
	require.NoError(t, st.Create(ctx, om))

	eventually(t, st, id, func(s *resources.OmniMachineStatus) bool {
		return s.TypedSpec().ReadyToUse && s.TypedSpec().Power == resources.PowerUnknown
	})

	ml := resources.NewMachineLabels(id)
	ml.Metadata().Labels().Set("anvil.dev/vendor", "qemu")
	require.NoError(t, st.Create(ctx, ml))

	ps := resources.NewPowerStatus(id)
	ps.TypedSpec().State = resources.PowerOff
	require.NoError(t, st.Create(ctx, ps))

	eventually(t, st, id, func(s *resources.OmniMachineStatus) bool {
		return s.TypedSpec().Power == resources.PowerOff && s.TypedSpec().Labels["anvil.dev/vendor"] == "qemu"
	})

	require.NoError(t, st.Destroy(ctx, om.Metadata()))

	require.Eventually(t, func() bool {
		_, err := safe.StateGetByID[*resources.OmniMachineStatus](ctx, st, id)

		return state.IsNotFoundError(err)
	}, 10*time.Second, 10*time.Millisecond, "the status goes with Omni's view")
}
