package agentapi

import (
	agentv1 "github.com/anvil-metal/anvil/api/agent/v1"
	"github.com/anvil-metal/anvil/provider/internal/lifecycle"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// wipeModes maps the wipe modes' names (flags, a machine's own mode) to the orders'.
var wipeModes = map[string]agentv1.Wipe_Mode{
	resources.WipeModeFast:        agentv1.Wipe_MODE_FAST,
	resources.WipeModeZeroes:      agentv1.Wipe_MODE_ZEROES,
	resources.WipeModeSecureErase: agentv1.Wipe_MODE_SECURE_ERASE,
}

// wipeScopes maps the wipe scopes' names (flags, a machine's own scope) to the orders'.
var wipeScopes = map[string]agentv1.Wipe_Scope{
	resources.WipeScopeAll:         agentv1.Wipe_SCOPE_ALL,
	resources.WipeScopeInstallDisk: agentv1.Wipe_SCOPE_INSTALL_DISK,
	resources.WipeScopeAllExcept:   agentv1.Wipe_SCOPE_ALL_EXCEPT,
}

var releaseThen = map[lifecycle.RejectedAction]agentv1.Release_Then{
	lifecycle.RejectedReboot:   agentv1.Release_THEN_REBOOT,
	lifecycle.RejectedPowerOff: agentv1.Release_THEN_POWER_OFF,
}

// order is the order the machine's agent should be carrying out now (the lifecycle's
// NextOrder), as the agent API says it. password gives the BMC password the provider
// has the machine's agent set.
//
// A wipe that keeps disks goes only to an agent that says it honours scopes: an older one
// would wipe them all. Such an agent is told to reboot instead, and the machine's next
// PXE boot brings the provider's current agent.
func order(m lifecycle.Machine, p lifecycle.Policy, hello *agentv1.Hello, password func(machineID string) string) *agentv1.Order {
	o := m.NextOrder(p)
	out := &agentv1.Order{Id: o.ID}

	switch o.Kind {
	case lifecycle.OrderRelease:
		out.Action = &agentv1.Order_Release{Release: &agentv1.Release{Then: releaseThen[o.Then]}}
	case lifecycle.OrderProvisionBMC:
		out.Action = &agentv1.Order_SetBmc{SetBmc: &agentv1.SetBMC{User: o.BMCUser, Password: password(m.ID)}}
	case lifecycle.OrderWipe:
		scope := wipeScopes[o.Wipe.Scope]
		if scope != agentv1.Wipe_SCOPE_ALL && !hello.GetWipeScopes() {
			return &agentv1.Order{Id: "reboot-for-wipe-scope-" + o.Wipe.GenerationID, Action: &agentv1.Order_Reboot{Reboot: &agentv1.Reboot{}}}
		}

		out.Action = &agentv1.Order_Wipe{Wipe: &agentv1.Wipe{
			GenerationId: o.Wipe.GenerationID, Mode: wipeModes[o.Wipe.Mode], IncludeRemovable: o.Wipe.IncludeRemovable,
			Scope: scope, Selector: o.Wipe.Selector,
		}}
	case lifecycle.OrderReboot:
		out.Action = &agentv1.Order_Reboot{Reboot: &agentv1.Reboot{}}
	case lifecycle.OrderKexec:
		// Its target is filled in by the session, once ready (kexecOrder).
		out.Action = &agentv1.Order_Kexec{Kexec: &agentv1.Kexec{}}
	case lifecycle.OrderHold:
		out.Action = &agentv1.Order_Hold{Hold: &agentv1.Hold{}}
	}

	return out
}
