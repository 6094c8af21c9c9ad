package agentapi

import (
	agentv1 "github.com/anvil-metal/anvil/api/agent/v1"
	"github.com/anvil-metal/anvil/provider/internal/machineview"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// Policy is how the provider orders agents about: the parts an operator chooses.
type Policy struct {
	// RejectedThen is what a rejected machine's agent does once released: reboot (it
	// then falls through to its disk, the provider answering boot-from-disk) or power off.
	RejectedThen agentv1.Release_Then
	// WipeMode is how disks are wiped, unless a machine has a mode of its own.
	WipeMode agentv1.Wipe_Mode
	// WipeRemovable has agents wipe removable media (USB sticks, SD cards) too.
	WipeRemovable bool
	// BMCPassword, when set, has accepted machines' agents provision a BMC user
	// (BMCUser) with this password, unless someone already gave the machine's BMC
	// credentials; nil: the provider never touches BMC users.
	BMCPassword func(machineID string) string
}

// WipeModes maps the wipe modes' names (flags, a machine's own mode) to the orders'.
var WipeModes = map[string]agentv1.Wipe_Mode{
	resources.WipeModeFast:        agentv1.Wipe_MODE_FAST,
	resources.WipeModeZeroes:      agentv1.Wipe_MODE_ZEROES,
	resources.WipeModeSecureErase: agentv1.Wipe_MODE_SECURE_ERASE,
}

// BMCUser is the BMC user agents provision for the provider.
const BMCUser = "anvil"

// bmcOrderID names the one BMC provisioning order a machine gets: once answered (done
// or failed) it is not sent again.
const bmcOrderID = "bmc-provision"

// NeedsBMCCredentials reports whether a machine's BMC config leaves the credentials to
// the agent: none at all, or an IPMI (or kind-less) one without a user — an address the
// user gave, say. A user's credentials are never replaced, and a Redfish, API or manual
// BMC is not IPMI-provisioned.
func NeedsBMCCredentials(cfg *resources.BMCConfigSpec) bool {
	return cfg == nil || (cfg.Username == "" && (cfg.Kind == "" || cfg.Kind == "ipmi"))
}

// Next is the order an agent should be carrying out now, from the machine's resources. It
// is a pure function of them: order IDs are derived from the state, so an agent never
// carries out the same order twice, across reconnects and provider restarts alike.
func (p Policy) Next(e *machineview.Entry) *agentv1.Order {
	var (
		intent resources.MachineIntentSpec
		status resources.MachineStatusSpec
	)

	if e != nil && e.Intent != nil {
		intent = *e.Intent
	}

	if e != nil && e.Status != nil {
		status = *e.Status
	}

	switch intent.Acceptance {
	case resources.AcceptanceRejected:
		return &agentv1.Order{Id: "release-rejected", Action: &agentv1.Order_Release{Release: &agentv1.Release{Then: p.RejectedThen}}}
	case resources.AcceptanceAccepted:
	default:
		// Pending: touch nothing until a person decides.
		return &agentv1.Order{Id: "hold-pending", Action: &agentv1.Order_Hold{Hold: &agentv1.Hold{}}}
	}

	// Credentials first, so that the provider can drive the machine's power from now on.
	if p.BMCPassword != nil && e != nil && NeedsBMCCredentials(e.BMC) && status.BMCOrder != bmcOrderID {
		return &agentv1.Order{Id: bmcOrderID, Action: &agentv1.Order_SetBmc{SetBmc: &agentv1.SetBMC{User: BMCUser, Password: p.BMCPassword(e.ID)}}}
	}

	// A wipe is owed after acceptance and after a deallocation, never while a tenant's
	// Talos is installed (transitions cannot get there; this keeps it so). An allocation
	// made while a wipe is owed waits for it: the machine is not handed over unwiped.
	installed := intent.Allocation != nil && status.InstalledAllocation == intent.Allocation.ID

	if intent.WipeID != "" && intent.WipeID != status.WipedID && !installed {
		mode := p.WipeMode
		if m, ok := WipeModes[intent.WipeMode]; ok {
			mode = m
		}

		return &agentv1.Order{Id: "wipe-" + intent.WipeID, Action: &agentv1.Order_Wipe{Wipe: &agentv1.Wipe{
			GenerationId: intent.WipeID, Mode: mode, IncludeRemovable: p.WipeRemovable,
		}}}
	}

	if a := intent.Allocation; a != nil && status.InstalledAllocation != a.ID {
		// Allocated: reboot, and the next PXE boot is Talos.
		return &agentv1.Order{Id: "boot-allocation-" + a.ID, Action: &agentv1.Order_Reboot{Reboot: &agentv1.Reboot{}}}
	}

	// Accepted and ready: wait for an allocation.
	return &agentv1.Order{Id: "hold-ready", Action: &agentv1.Order_Hold{Hold: &agentv1.Hold{}}}
}
