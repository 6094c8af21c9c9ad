package lifecycle

import "github.com/anvil-metal/anvil/provider/internal/resources"

// Boot is what a machine is served when it PXE-boots.
type Boot string

// What a machine can be served.
const (
	BootAgent Boot = "agent"
	BootTalos Boot = "talos"
	BootDisk  Boot = "disk"
)

// BootDecision is what to serve and why.
type BootDecision struct {
	Boot   Boot
	Reason string
	// Allocation is set for BootTalos.
	Allocation *resources.Allocation
}

// Boot decides what the machine boots (DESIGN.md's boot decision table, row by row).
func (m Machine) Boot(p Policy) BootDecision {
	switch {
	case m.Machine == nil:
		return BootDecision{Boot: BootAgent, Reason: "unknown machine"}
	case m.Acceptance() == resources.AcceptanceRejected:
		return BootDecision{Boot: BootDisk, Reason: "rejected"}
	case !m.Accepted():
		return BootDecision{Boot: BootAgent, Reason: "pending acceptance"}
	case m.Installed():
		return BootDecision{Boot: BootDisk, Reason: "installed"}
	case m.WipeOwed():
		return BootDecision{Boot: BootAgent, Reason: "wipe owed"}
	case m.BMCPending(p):
		return BootDecision{Boot: BootAgent, Reason: "BMC not yet provisioned"}
	case m.Allocation() == nil:
		return BootDecision{Boot: BootAgent, Reason: "accepted, not allocated"}
	default:
		return BootDecision{Boot: BootTalos, Reason: "allocated, not installed", Allocation: m.Allocation()}
	}
}
