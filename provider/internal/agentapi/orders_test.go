package agentapi

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	agentv1 "github.com/anvil-metal/anvil/api/agent/v1"
	"github.com/anvil-metal/anvil/provider/internal/lifecycle"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// TestOrder: the lifecycle's order, as the agent API says it (which order comes when is
// the lifecycle's own table test).
func TestOrder(t *testing.T) {
	t.Parallel()

	known := &resources.MachineSpec{}
	user := &resources.BMCConfigSpec{Kind: "ipmi", Address: "10.0.0.5", Username: "admin"}
	password := func(id string) string { return "pw-" + id }

	for _, tc := range []struct {
		name   string
		m      lifecycle.Machine
		policy lifecycle.Policy
		check  func(t *testing.T, o *agentv1.Order)
		// oldAgent is an agent from before wipe scopes.
		oldAgent bool
	}{
		{
			"hold", lifecycle.Machine{ID: "m1"}, lifecycle.Policy{},
			func(t *testing.T, o *agentv1.Order) { assert.NotNil(t, o.GetHold()) },
			false,
		},
		{
			"release, then power off",
			lifecycle.Machine{ID: "m1", Machine: known, Intent: &resources.MachineIntentSpec{Acceptance: resources.AcceptanceRejected}},
			lifecycle.Policy{RejectedThen: lifecycle.RejectedPowerOff},
			func(t *testing.T, o *agentv1.Order) {
				assert.Equal(t, agentv1.Release_THEN_POWER_OFF, o.GetRelease().GetThen())
			},
			false,
		},
		{
			"release, then reboot",
			lifecycle.Machine{ID: "m1", Machine: known, Intent: &resources.MachineIntentSpec{Acceptance: resources.AcceptanceRejected}},
			lifecycle.Policy{RejectedThen: lifecycle.RejectedReboot},
			func(t *testing.T, o *agentv1.Order) {
				assert.Equal(t, agentv1.Release_THEN_REBOOT, o.GetRelease().GetThen())
			},
			false,
		},
		{
			"provision the BMC with the derived password",
			lifecycle.Machine{ID: "m1", Machine: known, Intent: &resources.MachineIntentSpec{Acceptance: resources.AcceptanceAccepted}},
			lifecycle.Policy{ProvisionBMC: true},
			func(t *testing.T, o *agentv1.Order) {
				assert.Equal(t, lifecycle.BMCOrderID, o.GetId())
				assert.Equal(t, lifecycle.BMCUser, o.GetSetBmc().GetUser())
				assert.Equal(t, "pw-m1", o.GetSetBmc().GetPassword())
			},
			false,
		},
		{
			"wipe: the machine's own mode, removable media as the provider says",
			lifecycle.Machine{ID: "m1", Machine: known, BMC: user, Intent: &resources.MachineIntentSpec{Acceptance: resources.AcceptanceAccepted, WipeID: "w1", WipeMode: resources.WipeModeSecureErase}},
			lifecycle.Policy{WipeMode: resources.WipeModeZeroes, WipeRemovable: true},
			func(t *testing.T, o *agentv1.Order) {
				require.NotNil(t, o.GetWipe())
				assert.Equal(t, agentv1.Wipe_MODE_SECURE_ERASE, o.GetWipe().GetMode())
				assert.Equal(t, "w1", o.GetWipe().GetGenerationId())
				assert.True(t, o.GetWipe().GetIncludeRemovable())
			},
			false,
		},
		{
			"wipe: an unknown machine mode follows the provider's",
			lifecycle.Machine{ID: "m1", Machine: known, BMC: user, Intent: &resources.MachineIntentSpec{Acceptance: resources.AcceptanceAccepted, WipeID: "w1", WipeMode: "bogus"}},
			lifecycle.Policy{WipeMode: resources.WipeModeZeroes},
			func(t *testing.T, o *agentv1.Order) { assert.Equal(t, agentv1.Wipe_MODE_ZEROES, o.GetWipe().GetMode()) },
			false,
		},
		{
			"wipe: all but the disks the machine keeps",
			lifecycle.Machine{ID: "m1", Machine: known, BMC: user, Intent: &resources.MachineIntentSpec{
				Acceptance: resources.AcceptanceAccepted, WipeID: "w1", WipeScope: resources.WipeScopeAllExcept, WipeKeep: "model=ST16000*",
			}},
			lifecycle.Policy{WipeMode: resources.WipeModeFast},
			func(t *testing.T, o *agentv1.Order) {
				assert.Equal(t, agentv1.Wipe_SCOPE_ALL_EXCEPT, o.GetWipe().GetScope())
				assert.Equal(t, "model=ST16000*", o.GetWipe().GetSelector())
			},
			false,
		},
		{
			"wipe: an agent from before scopes gets no scoped wipe, a reboot into the current agent",
			lifecycle.Machine{ID: "m1", Machine: known, BMC: user, Intent: &resources.MachineIntentSpec{Acceptance: resources.AcceptanceAccepted, WipeID: "w1"}},
			lifecycle.Policy{WipeMode: resources.WipeModeFast, WipeScope: resources.WipeScopeInstallDisk, InstallDisk: "type=nvme"},
			func(t *testing.T, o *agentv1.Order) {
				assert.Nil(t, o.GetWipe())
				assert.NotNil(t, o.GetReboot())
				assert.Equal(t, "reboot-for-wipe-scope-w1", o.GetId())
			},
			true,
		},
		{
			"wipe: an agent from before scopes is sent a wipe of all disks as before",
			lifecycle.Machine{ID: "m1", Machine: known, BMC: user, Intent: &resources.MachineIntentSpec{Acceptance: resources.AcceptanceAccepted, WipeID: "w1"}},
			lifecycle.Policy{WipeMode: resources.WipeModeFast},
			func(t *testing.T, o *agentv1.Order) {
				assert.Equal(t, agentv1.Wipe_SCOPE_ALL, o.GetWipe().GetScope())
			},
			true,
		},
		{
			"reboot into Talos",
			lifecycle.Machine{ID: "m1", Machine: known, BMC: user, Intent: &resources.MachineIntentSpec{Acceptance: resources.AcceptanceAccepted, Allocation: &resources.Allocation{ID: "a1"}}},
			lifecycle.Policy{Kexec: resources.KexecNever},
			func(t *testing.T, o *agentv1.Order) {
				assert.Equal(t, "boot-allocation-a1", o.GetId())
				assert.NotNil(t, o.GetReboot())
			},
			false,
		},
		{
			"kexec into Talos: the target is the session's to fill in",
			lifecycle.Machine{ID: "m1", Machine: known, BMC: user, Intent: &resources.MachineIntentSpec{Acceptance: resources.AcceptanceAccepted, Allocation: &resources.Allocation{ID: "a1"}}},
			lifecycle.Policy{},
			func(t *testing.T, o *agentv1.Order) {
				assert.Equal(t, "kexec-a1", o.GetId())
				assert.NotNil(t, o.GetKexec())
			},
			false,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			tc.check(t, order(tc.m, tc.policy, &agentv1.Hello{WipeScopes: !tc.oldAgent}, password))
		})
	}
}
