package agentv1

// Order kinds: short, stable names for an order's action, as logs, events and metrics
// print them.
const (
	OrderKindHold     = "hold"
	OrderKindRelease  = "release"
	OrderKindGetBMC   = "bmc-get"
	OrderKindSetBMC   = "bmc-set"
	OrderKindWipe     = "wipe"
	OrderKindReboot   = "reboot"
	OrderKindPowerOff = "power-off"
	OrderKindKexec    = "kexec"
	OrderKindUnknown  = "unknown"
)

// OrderKind names the action an order carries. A nil order, an order without an action
// and an action this build does not know are all OrderKindUnknown, so callers need not
// check first.
func OrderKind(o *Order) string {
	switch o.GetAction().(type) {
	case *Order_Hold:
		return OrderKindHold
	case *Order_Release:
		return OrderKindRelease
	case *Order_GetBmc:
		return OrderKindGetBMC
	case *Order_SetBmc:
		return OrderKindSetBMC
	case *Order_Wipe:
		return OrderKindWipe
	case *Order_Reboot:
		return OrderKindReboot
	case *Order_PowerOff:
		return OrderKindPowerOff
	case *Order_Kexec:
		return OrderKindKexec
	default:
		return OrderKindUnknown
	}
}
