package lifecycle_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/anvil-metal/anvil/provider/internal/lifecycle"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

func TestOmniInstalled(t *testing.T) {
	t.Parallel()

	wiped := func(events uint64) *resources.MachineStatusSpec {
		return &resources.MachineStatusSpec{LastWipe: &resources.WipeRecord{ID: "w", OmniInstallEvents: events}}
	}

	for _, tc := range []struct {
		name   string
		events uint64
		status *resources.MachineStatusSpec
		want   bool
	}{
		{"never counted, no status", 0, nil, false},
		{"counted, never wiped", 1, nil, true},
		{"counted, no wipe report", 1, &resources.MachineStatusSpec{}, true},
		{"wiped after the last count", 3, wiped(3), false},
		{"counted again since the wipe", 4, wiped(3), true},
		{"Omni's count went back (its state was restored)", 2, wiped(3), false},
	} {
		assert.Equal(t, tc.want, lifecycle.OmniInstalled(resources.OmniMachineSpec{InstallEventID: tc.events}, tc.status), tc.name)
	}
}

// TestIdlePower: an owner's idle power (Omni's preferred power state) replaces the
// provider's idle default, never the power a machine with work needs, and yields to an
// override.
func TestIdlePower(t *testing.T) {
	t.Parallel()

	on, off, def := resources.PowerOn, resources.PowerOff, resources.PowerDefault

	for _, tc := range []struct {
		name            string
		policyIdle      resources.PowerState
		power, idle     resources.PowerState
		wipeOwed, alloc bool
		want            resources.PowerState
	}{
		{"the provider's default", off, def, "", false, false, off},
		{"the owner's idle on", off, def, on, false, false, on},
		{"the owner's idle off", on, def, off, false, false, off},
		{"a wipe owed: on whatever the idle power", off, def, off, true, false, on},
		{"allocated: on whatever the idle power", off, def, off, false, true, on},
		{"an override off wins over an allocation", off, off, on, false, true, off},
	} {
		intent := &resources.MachineIntentSpec{Acceptance: resources.AcceptanceAccepted, Power: tc.power, IdlePower: tc.idle}
		status := &resources.MachineStatusSpec{}

		if tc.wipeOwed {
			intent.WipeID = "w"
		}

		if tc.alloc {
			intent.Allocation = &resources.Allocation{ID: "a", TalosVersion: "v1.9.0"}
		}

		m := lifecycle.Machine{ID: "m", Machine: &resources.MachineSpec{}, Intent: intent, Status: status}
		assert.Equal(t, tc.want, m.DesiredPower(lifecycle.Policy{IdlePower: tc.policyIdle}), tc.name)
	}
}
