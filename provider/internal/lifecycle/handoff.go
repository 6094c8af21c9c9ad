package lifecycle

import (
	"slices"
	"time"

	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// DefaultKexecTimeout is how long a kexec handoff may take, from the order to Talos
// seen up, before the provider boots the machine through its firmware instead.
const DefaultKexecTimeout = 5 * time.Minute

// KexecMode is the machine's kexec handoff mode: its own, else the provider's, else auto.
func (m Machine) KexecMode(p Policy) string {
	if mode := m.intent().Kexec; slices.Contains(resources.KexecModes, mode) {
		return mode
	}

	if slices.Contains(resources.KexecModes, p.Kexec) {
		return p.Kexec
	}

	return resources.KexecAuto
}

// KexecAllowed says whether the machine may be handed to Talos by kexec: its agent can
// (one running as a Talos extension cannot, whatever the mode), not never, and under
// auto only if its hardware is not known to break across one.
func (m Machine) KexecAllowed(p Policy) bool {
	if m.status().AgentKexecUnavailable != "" {
		return false
	}

	switch m.KexecMode(p) {
	case resources.KexecNever:
		return false
	case resources.KexecAlways:
		return true
	default:
		return len(m.status().KexecBlockers) == 0
	}
}

// Handoff is the kexec handoff of the current allocation, nil when there was none.
func (m Machine) Handoff() *resources.HandoffRecord {
	h, a := m.status().Handoff, m.Allocation()
	if h == nil || a == nil || h.AllocationID != a.ID {
		return nil
	}

	return h
}

// HandoffPending says whether a kexec handoff of the current allocation was ordered and
// neither seen through (Talos up, or installed) nor reported failed.
func (m Machine) HandoffPending() bool {
	h := m.Handoff()

	return h != nil && h.ConfirmedAt.IsZero() && h.Failure == "" && !m.Installed()
}

// HandoffDeadline is when a pending handoff is given up (zero when none is pending).
func (m Machine) HandoffDeadline(p Policy) time.Time {
	if !m.HandoffPending() {
		return time.Time{}
	}

	timeout := p.KexecTimeout
	if timeout <= 0 {
		timeout = DefaultKexecTimeout
	}

	return m.Handoff().OrderedAt.Add(timeout)
}

// KexecHandsOver says whether the current allocation's configuration is the kexec
// token's alone: the agent loaded the allocation's Talos to kexec into (an order sent
// to a session that was already gone — the machine powered off under it — never is),
// the handoff has not failed, and its Talos was seen up (or installed) or the handoff's
// deadline has not passed. Otherwise the machine boots through its firmware, whose boot
// script carries the other kind of token, which counts.
func (m Machine) KexecHandsOver(p Policy, now time.Time) bool {
	h := m.Handoff()
	if h == nil || h.Failure != "" || h.LoadedAt.IsZero() {
		return false
	}

	return !h.ConfirmedAt.IsZero() || m.Installed() || now.Before(m.HandoffDeadline(p))
}

// HandoffFallback says whether the current allocation's kexec'd Talos was not seen up
// by the deadline, so that the machine must be booted through its firmware by its BMC
// (PXE once, then a cycle): the fallback's ID (one per allocation) and why; "" when not.
// A kexec the agent reports failed needs no BMC: its agent, still up, reboots the
// machine the way it would have without kexec (NextOrder).
func (m Machine) HandoffFallback(p Policy, now time.Time) (id, reason string) {
	h := m.Handoff()

	switch {
	case h == nil || m.Installed() || !h.ConfirmedAt.IsZero() || h.Failure != "":
		return "", ""
	case !now.Before(m.HandoffDeadline(p)):
		return "handoff-" + h.AllocationID, "Talos not seen up " + now.Sub(h.OrderedAt).Round(time.Second).String() + " after the kexec order"
	default:
		return "", ""
	}
}
