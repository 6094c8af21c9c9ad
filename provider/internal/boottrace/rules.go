package boottrace

import (
	"strings"
	"time"
	"unicode/utf8"
)

// mark applies one mark at a time; it reports whether the timeline changed. The rules:
// a later phase than the boot's last extends the boot (observing the time since that
// last mark); a phase that begins boots (DHCP, script, agent assets) coming after a
// later one, or more than staleAfter after the boot's last mark, starts a new boot;
// anything else (an agent reconnecting, iPXE's own DHCP after the firmware's, iPXE
// fetching its script again) is a repeat and changes nothing.
func (r *Recorder) mark(id string, phase Phase, firmware, detail string, at time.Time) bool {
	i := phaseIndex(phase)
	if i < 0 || id == "" {
		return false
	}

	m := r.machine(id, at)
	if m == nil {
		return false
	}

	firmware = firmwareName(firmware)

	switch m.marks {
	case 0:
		m.start()
	default:
		last := &m.boot[m.marks-1]
		l := phaseIndex(last.Phase)
		stale := at.Sub(last.At) > staleAfter

		switch {
		case beginsBoot(phase) && (i < l || stale):
			m.start()
		case i > l:
			fw := firmware
			if fw == "" {
				fw = m.firmware
			}

			if d := at.Sub(last.At); d >= 0 {
				r.observers[i][firmwareIndex(fw)].Observe(d.Seconds())
			}
		default:
			return false
		}
	}

	if m.firmware == "" {
		m.firmware = firmware
	}

	// Room is certain: a boot's marks are of ever later phases, one each at most.
	m.boot[m.marks] = Mark{Phase: phase, At: at, Detail: detail, Firmware: firmware}
	m.marks++
	m.note(event{at: at, text: detail, phase: int8(i + 1), firmware: int8(firmwareIndex(firmware))}) //nolint:gosec // i and the index are below len(Phases)
	r.broadcast()

	return true
}

// machine returns the machine's entry, made when new (nil when there is no room).
func (r *Recorder) machine(id string, at time.Time) *machine {
	m := r.machines[id]
	if m == nil {
		if len(r.machines) >= maxMachines {
			r.sweep(at)

			if len(r.machines) >= maxMachines {
				return nil
			}
		}

		m = &machine{}
		// The ID may be a slice of a request's text: keeping it must not keep the request.
		r.machines[strings.Clone(id)] = m
	}

	if at.After(m.seen) {
		m.seen = at
	}

	if at.Sub(r.lastSweep) >= sweepEvery {
		r.sweep(at)
	}

	return m
}

// sweep forgets what is stale, at most once every sweepEvery.
func (r *Recorder) sweep(at time.Time) {
	if at.Sub(r.lastSweep) < sweepEvery {
		return
	}

	r.lastSweep = at

	for id, m := range r.machines {
		if at.Sub(m.seen) > forgetAfter {
			delete(r.machines, id)
		}
	}

	for mac, h := range r.dhcp {
		if at.Sub(h.at) > heldFor {
			delete(r.dhcp, mac)
		}
	}

	for addr, h := range r.addrs {
		if at.Sub(h.at) > heldFor {
			delete(r.addrs, addr)
		}
	}
}

func (r *Recorder) broadcast() {
	if r.changed != nil {
		close(r.changed)
		r.changed = nil
	}
}

// start begins a new boot.
func (m *machine) start() {
	m.boot = [len(phaseNames)]Mark{} // not to keep the last boot's details
	m.marks = 0
	m.firmware = ""
}

func (m *machine) note(ev event) {
	if len(m.events) < MaxEvents {
		if len(m.events) == cap(m.events) {
			// Grown by hand, so that a full ring holds MaxEvents and not append's next size.
			grown := make([]event, len(m.events), min(max(2*cap(m.events), 8), MaxEvents))
			copy(grown, m.events)
			m.events = grown
		}

		m.events = append(m.events, ev)

		return
	}

	m.events[m.next] = ev
	m.next = (m.next + 1) % MaxEvents
}

// phaseNames are the events' words for the phases, in Phases' order.
var phaseNames = [...]string{
	"DHCP offer", "boot script fetched", "agent kernel and initramfs fetched", "agent registered", "handed to Talos", "Talos installed",
}

func phaseIndex(p Phase) int {
	switch p {
	case PhaseDHCP:
		return 0
	case PhaseScript:
		return 1
	case PhaseAgentAssets:
		return 2
	case PhaseAgentRegistered:
		return 3
	case PhaseHandoff:
		return 4
	case PhaseInstalled:
		return 5
	default:
		return -1
	}
}

// beginsBoot says whether a phase only happens at the start of a boot.
func beginsBoot(p Phase) bool {
	return p == PhaseDHCP || p == PhaseScript || p == PhaseAgentAssets
}

// firmwareName keeps the firmware kinds the histogram labels; anything else is unknown.
// The names returned are the recorder's own, so that a mark keeps none of the caller's text.
func firmwareName(fw string) string {
	if i := firmwareIndex(fw); i < 2 {
		return firmwares[i]
	}

	return ""
}

func firmwareIndex(fw string) int {
	switch fw {
	case firmwares[0]:
		return 0
	case firmwares[1]:
		return 1
	default:
		return 2
	}
}

// words is the event as Events tells it.
func (e event) words() Event {
	if e.phase == 0 {
		return Event{At: e.at, Message: e.text}
	}

	firmware := "" // unknown: the words leave it out
	if e.firmware < 2 {
		firmware = firmwares[e.firmware]
	}

	return Event{At: e.at, Message: message(int(e.phase-1), e.text, firmware)}
}

func message(i int, detail, firmware string) string {
	msg := phaseNames[i]

	switch {
	case detail != "" && firmware != "":
		msg += " (" + detail + ", " + firmware + ")"
	case detail != "":
		msg += " (" + detail + ")"
	case firmware != "":
		msg += " (" + firmware + ")"
	}

	return clip(msg)
}

// clip bounds a message, on a rune boundary.
func clip(s string) string {
	if len(s) <= maxMessage {
		return s
	}

	cut := maxMessage
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}

	return s[:cut] + "…"
}
