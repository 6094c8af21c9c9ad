// Package lifecycle holds the rules of a machine's lifecycle (DESIGN.md, "The machine
// lifecycle"): from a machine's resources it answers its phase, whether a wipe is owed,
// whether it is installed, what it boots, the power it should have and the order its
// agent should be carrying out.
//
// They are pure functions of the resources, and the only place these rules are written:
// the iPXE handler, the agent sessions, the power controller, the control API, anvilctl
// (and the Omni adapter) all ask here, so they cannot disagree.
package lifecycle

import (
	"time"

	"github.com/cosi-project/runtime/pkg/resource"

	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// Machine is what the rules read of one machine. A nil field is a resource that does
// not exist: no Machine means the provider never saw it boot, no Intent means nobody
// decided anything (pending).
type Machine struct {
	ID      resource.ID
	Machine *resources.MachineSpec
	Intent  *resources.MachineIntentSpec
	Status  *resources.MachineStatusSpec
	// BMC is how the machine's BMC is reached, when anyone said (never the password).
	BMC *resources.BMCConfigSpec
}

// Policy is what an operator chooses about every machine (the provider's flags).
type Policy struct {
	// ProvisionBMC has accepted machines' agents provision BMC credentials in-band when
	// nobody gave them.
	ProvisionBMC bool
	// IdlePower is the power of an accepted machine with nothing to do: on or off.
	IdlePower resources.PowerState
	// RejectedThen is what a rejected machine's agent does once released.
	RejectedThen RejectedAction
	// WipeMode is how disks are wiped unless a machine has a mode of its own.
	WipeMode string
	// WipeRemovable has agents wipe removable media too.
	WipeRemovable bool
	// WipeScope is which disks wipes touch unless a machine has a scope of its own
	// (resources.WipeScopes; "" is all); WipeKeep is the selector all-except keeps.
	WipeScope string
	WipeKeep  string
	// InstallDisk is the install disk selector of allocations that give none; for the
	// install-disk wipe scope, the disk of a machine that never had an allocation.
	InstallDisk string
	// Kexec is the kexec handoff mode of machines without one of their own: auto,
	// always or never ("" is auto).
	Kexec string
	// KexecTimeout bounds a kexec handoff, from the order to Talos seen up
	// (DefaultKexecTimeout when zero).
	KexecTimeout time.Duration
	// KeepWarm keeps a machine that would idle powered off on, its agent up, this long
	// after its last wipe, for a kexec handoff (zero: no window).
	KeepWarm time.Duration
}

// RejectedAction is what a rejected machine's running agent does.
type RejectedAction string

// Rejected actions.
const (
	// RejectedReboot reboots, falling through to the machine's disk.
	RejectedReboot RejectedAction = "reboot"
	// RejectedPowerOff powers the machine off.
	RejectedPowerOff RejectedAction = "poweroff"
)

// Phase is where a machine stands in its lifecycle.
type Phase string

// Phases, in lifecycle order.
const (
	// PhaseUnknown: the provider never saw the machine boot.
	PhaseUnknown Phase = "unknown"
	// PhasePending: seen, waiting for a person (or --auto-accept) to decide.
	PhasePending Phase = "pending"
	// PhaseRejected: the provider keeps off it.
	PhaseRejected Phase = "rejected"
	// PhasePreparing: accepted and unallocated, with a wipe or BMC provisioning owed.
	PhasePreparing Phase = "preparing"
	// PhaseReady: accepted, nothing owed, not allocated: it may be handed out.
	PhaseReady Phase = "ready"
	// PhaseAllocated: handed to Talos, not installed yet (perhaps still owing a wipe).
	PhaseAllocated Phase = "allocated"
	// PhaseInstalled: Talos is installed for the current allocation.
	PhaseInstalled Phase = "installed"
)

// intent is the machine's intent, pending when there is none.
func (m Machine) intent() resources.MachineIntentSpec {
	if m.Intent == nil {
		return resources.MachineIntentSpec{Acceptance: resources.AcceptancePending, Power: resources.PowerDefault}
	}

	return *m.Intent
}

func (m Machine) status() resources.MachineStatusSpec {
	if m.Status == nil {
		return resources.MachineStatusSpec{}
	}

	return *m.Status
}

// Acceptance is the machine's acceptance: pending unless someone decided.
func (m Machine) Acceptance() resources.Acceptance {
	switch a := m.intent().Acceptance; a {
	case resources.AcceptanceAccepted, resources.AcceptanceRejected:
		return a
	default:
		return resources.AcceptancePending
	}
}

// Accepted says whether the provider may drive the machine: read and act on its BMC,
// order its agent beyond holding.
func (m Machine) Accepted() bool { return m.Acceptance() == resources.AcceptanceAccepted }

// Allocation is the machine's current allocation, nil when it has none.
func (m Machine) Allocation() *resources.Allocation { return m.intent().Allocation }

// Installed says whether Talos reported itself installed for the current allocation.
func (m Machine) Installed() bool {
	a := m.Allocation()

	return a != nil && m.status().InstalledAllocation == a.ID
}

// WipeOwed says whether the machine owes a wipe: one was asked (acceptance,
// deallocation) and not reported done. An installed machine never owes one: a tenant's
// Talos is never wiped from under it.
func (m Machine) WipeOwed() bool {
	id := m.intent().WipeID

	return id != "" && id != m.status().WipedID && !m.Installed()
}

// BMCOrderID names the one BMC provisioning order a machine gets: once its agent
// answered it (done or failed) it is not sent again.
const BMCOrderID = "bmc-provision"

// NeedsBMCCredentials reports whether a machine's BMC config leaves the credentials to
// the agent: none at all, or an IPMI (or kind-less) one without a user — an address the
// user gave, say. A user's credentials are never replaced, and a Redfish, API or manual
// BMC is not IPMI-provisioned.
func NeedsBMCCredentials(cfg *resources.BMCConfigSpec) bool {
	return cfg == nil || (cfg.Username == "" && (cfg.Kind == "" || cfg.Kind == "ipmi"))
}

// BMCPending says whether an accepted machine's agent still owes the in-band BMC
// provisioning the policy asks for. An installed machine is never held back for it.
func (m Machine) BMCPending(p Policy) bool {
	return p.ProvisionBMC && m.Accepted() && !m.Installed() && NeedsBMCCredentials(m.BMC) &&
		m.status().BMCOrder != BMCOrderID
}

// Phase is where the machine stands.
func (m Machine) Phase(p Policy) Phase {
	switch {
	case m.Machine == nil && m.Intent == nil:
		return PhaseUnknown
	case m.Acceptance() == resources.AcceptanceRejected:
		return PhaseRejected
	case !m.Accepted():
		return PhasePending
	case m.Installed():
		return PhaseInstalled
	case m.Allocation() != nil:
		return PhaseAllocated
	case m.WipeOwed() || m.BMCPending(p):
		return PhasePreparing
	default:
		return PhaseReady
	}
}

// Allocatable says whether the machine may be handed out now: ready, not cordoned and not
// held after a security event.
func (m Machine) Allocatable(p Policy) bool {
	return m.Phase(p) == PhaseReady && !m.intent().Cordoned && m.intent().Held == ""
}

// Held is why the machine is held after a security event ("" when it is not).
func (m Machine) Held() string { return m.intent().Held }
