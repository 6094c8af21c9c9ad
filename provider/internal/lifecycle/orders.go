package lifecycle

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/anvil-metal/anvil/internal/disksel"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// OrderKind is what an order asks the agent to do.
type OrderKind string

// Order kinds.
const (
	// OrderHold: wait, touching nothing.
	OrderHold OrderKind = "hold"
	// OrderRelease: stop holding and do Order.Then (a rejected machine).
	OrderRelease OrderKind = "release"
	// OrderProvisionBMC: set up the provider's BMC user through the local interface.
	OrderProvisionBMC OrderKind = "provision-bmc"
	// OrderWipe: wipe the disks.
	OrderWipe OrderKind = "wipe"
	// OrderReboot: reboot; the next PXE boot serves what the machine's state says.
	OrderReboot OrderKind = "reboot"
	// OrderKexec: boot the allocation's Talos straight from the agent (Order.Allocation).
	OrderKexec OrderKind = "kexec"
)

// BMCUser is the BMC user agents provision for the provider.
const BMCUser = "anvil"

// Order is what an agent should be carrying out now. Its ID is derived from the state,
// so an agent never carries out the same order twice, across reconnects and provider
// restarts alike.
type Order struct {
	ID   string
	Kind OrderKind
	// Then is what a released agent does.
	Then RejectedAction
	// Wipe is set for OrderWipe.
	Wipe *WipeOrder
	// BMCUser is the user OrderProvisionBMC sets up (the password is derived apart).
	BMCUser string
	// Allocation is what OrderKexec boots.
	Allocation *resources.Allocation
}

// WipeOrder is one wipe: its generation, how, and which disks (Scope, one of
// resources.WipeScopes, and the disk Selector it reads).
type WipeOrder struct {
	GenerationID     string
	Mode             string
	IncludeRemovable bool
	Scope            string
	Selector         string
}

// ValidWipeScope checks a wipe scope and the keep selector that goes with it: all-except
// needs one (keeping nothing is all), the others take none.
func ValidWipeScope(scope, keep string) error {
	if scope != "" && !slices.Contains(resources.WipeScopes, scope) {
		return fmt.Errorf("wipe scope %q is not one of %s", scope, strings.Join(resources.WipeScopes, ", "))
	}

	sel, err := disksel.Parse(keep)
	if err != nil {
		return err
	}

	switch {
	case scope == resources.WipeScopeAllExcept && sel.IsZero():
		return errors.New("wipe scope all-except needs a selector of the disks to keep")
	case scope != resources.WipeScopeAllExcept && !sel.IsZero():
		return fmt.Errorf("a selector of disks to keep goes with the all-except scope, not %q", scope)
	}

	return nil
}

// WipeScope is the scope of the machine's wipes and the selector it reads: the machine's
// own scope, else the provider's. The install-disk scope names the disk the machine last
// installed to, else the one being allocated, else the provider's install disk selector.
func (m Machine) WipeScope(p Policy) (scope, selector string) {
	intent := m.intent()

	scope, selector = p.WipeScope, p.WipeKeep
	if intent.WipeScope != "" {
		scope, selector = intent.WipeScope, intent.WipeKeep
	}

	switch scope {
	case resources.WipeScopeInstallDisk:
		switch {
		case intent.InstallDisk != "":
			return scope, intent.InstallDisk
		case m.Allocation() != nil && m.Allocation().InstallDisk != nil:
			return scope, m.Allocation().InstallDisk.Identity
		default:
			return scope, p.InstallDisk
		}
	case resources.WipeScopeAllExcept:
		return scope, selector
	default:
		return resources.WipeScopeAll, ""
	}
}

// NextOrder is the order the machine's agent should be carrying out now.
func (m Machine) NextOrder(p Policy) Order {
	switch {
	case m.Acceptance() == resources.AcceptanceRejected:
		return Order{ID: "release-rejected", Kind: OrderRelease, Then: p.RejectedThen}
	case !m.Accepted():
		// Pending: touch nothing until someone decides.
		return Order{ID: "hold-pending", Kind: OrderHold}
	case m.Installed():
		// Its boot goes to its disk: an agent still up gets out of the way.
		return Order{ID: "boot-disk-" + m.Allocation().ID, Kind: OrderReboot}
	case m.BMCPending(p):
		// Credentials first, so that the provider can drive the machine's power from now on.
		return Order{ID: BMCOrderID, Kind: OrderProvisionBMC, BMCUser: BMCUser}
	case m.WipeOwed():
		// An allocation made while a wipe is owed waits for it: never handed over unwiped.
		intent := m.intent()

		mode := p.WipeMode
		if slices.Contains(resources.WipeModes, intent.WipeMode) {
			mode = intent.WipeMode
		}

		scope, selector := m.WipeScope(p)

		return Order{ID: "wipe-" + intent.WipeID, Kind: OrderWipe, Wipe: &WipeOrder{
			GenerationID: intent.WipeID, Mode: mode, IncludeRemovable: p.WipeRemovable, Scope: scope, Selector: selector,
		}}
	case m.Allocation() != nil && m.KexecAllowed(p) && (m.Handoff() == nil || m.Handoff().Failure == ""):
		// Allocated, the agent up: straight into Talos, skipping the firmware.
		return Order{ID: "kexec-" + m.Allocation().ID, Kind: OrderKexec, Allocation: m.Allocation()}
	case m.Allocation() != nil:
		// Allocated, no kexec (or the agent could not make one): reboot, and the next PXE
		// boot is Talos.
		return Order{ID: "boot-allocation-" + m.Allocation().ID, Kind: OrderReboot}
	default:
		// Ready: wait for an allocation.
		return Order{ID: "hold-ready", Kind: OrderHold}
	}
}
