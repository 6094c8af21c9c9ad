// Package boot decides what a machine boots and renders the iPXE script for it.
//
// The decision is a pure function of the machine's resources (DESIGN.md, "The machine
// lifecycle"): the boot services read state, ask Decide, and render.
package boot

import "github.com/anvil-metal/anvil/provider/internal/resources"

// Kind is what a machine is served.
type Kind string

// What a machine can be served.
const (
	KindAgent Kind = "agent"
	KindTalos Kind = "talos"
	KindDisk  Kind = "disk"
)

// Inputs are the resources a decision reads. Nil means the resource does not exist.
type Inputs struct {
	Machine *resources.MachineSpec
	Intent  *resources.MachineIntentSpec
	Status  *resources.MachineStatusSpec
	// BMCPending is true while an accepted machine still owes BMC provisioning.
	BMCPending bool
}

// Decision is what to serve and why.
type Decision struct {
	Kind   Kind
	Reason string
	// Allocation is set for KindTalos.
	Allocation *resources.Allocation
}

// Decide returns what the machine boots.
func Decide(in Inputs) Decision {
	if in.Machine == nil {
		return Decision{Kind: KindAgent, Reason: "unknown machine"}
	}

	intent := in.Intent
	if intent == nil {
		intent = &resources.MachineIntentSpec{Acceptance: resources.AcceptancePending}
	}

	var status resources.MachineStatusSpec
	if in.Status != nil {
		status = *in.Status
	}

	switch intent.Acceptance {
	case resources.AcceptanceRejected:
		return Decision{Kind: KindDisk, Reason: "rejected"}
	case resources.AcceptanceAccepted:
	default:
		return Decision{Kind: KindAgent, Reason: "pending acceptance"}
	}

	if intent.WipeID != "" && intent.WipeID != status.WipedID {
		return Decision{Kind: KindAgent, Reason: "wipe owed"}
	}

	if in.BMCPending {
		return Decision{Kind: KindAgent, Reason: "BMC not yet provisioned"}
	}

	alloc := intent.Allocation
	if alloc == nil {
		return Decision{Kind: KindAgent, Reason: "accepted, not allocated"}
	}

	if status.InstalledAllocation == alloc.ID {
		return Decision{Kind: KindDisk, Reason: "installed"}
	}

	return Decision{Kind: KindTalos, Reason: "allocated, not installed", Allocation: alloc}
}
