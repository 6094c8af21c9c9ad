package lifecycle

import (
	"time"

	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// DesiredPower is the power the machine's state wants: "" (hands off: its BMC is not
// even read) unless it is accepted; then the override (the user's, or Omni's power-off
// request); on while allocated or while its agent has work (a wipe, BMC provisioning);
// else its idle power (Omni's preference) or the provider's idle default.
func (m Machine) DesiredPower(p Policy) resources.PowerState {
	if !m.Accepted() {
		return ""
	}

	if pw := m.intent().Power; pw == resources.PowerOn || pw == resources.PowerOff {
		return pw
	}

	idle := p.IdlePower
	if pw := m.intent().IdlePower; pw == resources.PowerOn || pw == resources.PowerOff {
		idle = pw
	}

	if m.Allocation() != nil || m.WipeOwed() || m.BMCPending(p) || idle == resources.PowerOn {
		return resources.PowerOn
	}

	return resources.PowerOff
}

// DesiredPowerAt is DesiredPower at a moment: a machine that would be powered off
// idle stays on, its agent up, for the keep-warm window after its last wipe, so that an
// allocation made then is handed over by kexec rather than by a cold boot.
func (m Machine) DesiredPowerAt(p Policy, now time.Time) resources.PowerState {
	desired := m.DesiredPower(p)

	if until := m.WarmUntil(p); desired == resources.PowerOff && m.intent().Power != resources.PowerOff && now.Before(until) {
		return resources.PowerOn
	}

	return desired
}

// WarmUntil is the end of the keep-warm window after the machine's last wipe (zero when
// there is none).
func (m Machine) WarmUntil(p Policy) time.Time {
	w := m.status().LastWipe
	if p.KeepWarm <= 0 || w == nil || w.At.IsZero() || !m.KexecAllowed(p) {
		return time.Time{}
	}

	return w.At.Add(p.KeepWarm)
}

// RebootWanted says whether a reboot was asked that the power controller has not
// carried out yet (done is the last request it carried out).
func (m Machine) RebootWanted(done string) bool {
	id := m.intent().RebootID

	return m.Accepted() && id != "" && id != done
}
