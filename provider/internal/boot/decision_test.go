package boot_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/anvil-metal/anvil/provider/internal/boot"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// TestDecide walks DESIGN.md's boot decision table row by row.
func TestDecide(t *testing.T) {
	t.Parallel()

	known := &resources.MachineSpec{UUID: "m1"}
	alloc := &resources.Allocation{ID: "a1", TalosVersion: "v1.9.0"}

	for _, tc := range []struct {
		name string
		in   boot.Inputs
		want boot.Kind
	}{
		{"unknown", boot.Inputs{}, boot.KindAgent},
		{"unknown even with an intent", boot.Inputs{Intent: &resources.MachineIntentSpec{Acceptance: resources.AcceptanceAccepted, Allocation: alloc}}, boot.KindAgent},
		{"pending: no intent", boot.Inputs{Machine: known}, boot.KindAgent},
		{"pending", boot.Inputs{Machine: known, Intent: &resources.MachineIntentSpec{Acceptance: resources.AcceptancePending}}, boot.KindAgent},
		{"pending with an allocation never boots Talos", boot.Inputs{Machine: known, Intent: &resources.MachineIntentSpec{Acceptance: resources.AcceptancePending, Allocation: alloc}}, boot.KindAgent},
		{"rejected", boot.Inputs{Machine: known, Intent: &resources.MachineIntentSpec{Acceptance: resources.AcceptanceRejected}}, boot.KindDisk},
		{"rejected with a wipe owed is still never wiped", boot.Inputs{Machine: known, Intent: &resources.MachineIntentSpec{Acceptance: resources.AcceptanceRejected, WipeID: "w1"}}, boot.KindDisk},
		{"accepted, wipe owed", boot.Inputs{Machine: known, Intent: &resources.MachineIntentSpec{Acceptance: resources.AcceptanceAccepted, WipeID: "w1", Allocation: alloc}}, boot.KindAgent},
		{"accepted, wipe done, allocated", boot.Inputs{Machine: known, Intent: &resources.MachineIntentSpec{Acceptance: resources.AcceptanceAccepted, WipeID: "w1", Allocation: alloc}, Status: &resources.MachineStatusSpec{WipedID: "w1"}}, boot.KindTalos},
		{"accepted, BMC not provisioned", boot.Inputs{Machine: known, Intent: &resources.MachineIntentSpec{Acceptance: resources.AcceptanceAccepted, Allocation: alloc}, BMCPending: true}, boot.KindAgent},
		{"accepted, not allocated", boot.Inputs{Machine: known, Intent: &resources.MachineIntentSpec{Acceptance: resources.AcceptanceAccepted}}, boot.KindAgent},
		{"allocated, not installed", boot.Inputs{Machine: known, Intent: &resources.MachineIntentSpec{Acceptance: resources.AcceptanceAccepted, Allocation: alloc}}, boot.KindTalos},
		{"allocated, installed under an earlier allocation", boot.Inputs{Machine: known, Intent: &resources.MachineIntentSpec{Acceptance: resources.AcceptanceAccepted, Allocation: alloc}, Status: &resources.MachineStatusSpec{InstalledAllocation: "a0"}}, boot.KindTalos},
		{"allocated and installed", boot.Inputs{Machine: known, Intent: &resources.MachineIntentSpec{Acceptance: resources.AcceptanceAccepted, Allocation: alloc}, Status: &resources.MachineStatusSpec{InstalledAllocation: "a1"}}, boot.KindDisk},
		{"deallocated (wipe owed)", boot.Inputs{Machine: known, Intent: &resources.MachineIntentSpec{Acceptance: resources.AcceptanceAccepted, WipeID: "w2"}, Status: &resources.MachineStatusSpec{InstalledAllocation: "a1", WipedID: "w1"}}, boot.KindAgent},
		{"deallocated and wiped", boot.Inputs{Machine: known, Intent: &resources.MachineIntentSpec{Acceptance: resources.AcceptanceAccepted, WipeID: "w2"}, Status: &resources.MachineStatusSpec{InstalledAllocation: "a1", WipedID: "w2"}}, boot.KindAgent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			got := boot.Decide(tc.in)
			assert.Equal(t, tc.want, got.Kind, got.Reason)
			assert.NotEmpty(t, got.Reason)

			if got.Kind == boot.KindTalos {
				assert.Equal(t, tc.in.Intent.Allocation, got.Allocation)
			}
		})
	}
}
