// Package boottrace keeps each machine's boot timeline — DHCP offer, boot script, agent
// assets, agent registered, handoff to Talos, Talos installed — and its recent events,
// and times the steps between the phases (anvil_boot_phase_duration_seconds).
//
// The boot services mark phases as they serve them; the web console reads the timelines
// and events. Everything is in memory and bounded: a restart starts the timelines again.
package boottrace

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Phase is one step of a machine's boot.
type Phase string

// Phases of a boot, in the order a machine goes through them.
const (
	// PhaseDHCP: a DHCP offer with boot options was sent (ProxyDHCP or full DHCP).
	PhaseDHCP Phase = "dhcp"
	// PhaseScript: the iPXE boot script was fetched.
	PhaseScript Phase = "script"
	// PhaseAgentAssets: the agent's kernel and initramfs were fetched (the initramfs
	// request completing is the mark).
	PhaseAgentAssets Phase = "agent-assets"
	// PhaseAgentRegistered: the agent's session hello was accepted.
	PhaseAgentRegistered Phase = "agent-registered"
	// PhaseHandoff: the machine was handed to Talos: its Talos script served (iPXE
	// chain) or the agent's kexec loaded.
	PhaseHandoff Phase = "handoff"
	// PhaseInstalled: Talos was reported installed (event sink, Omni) or marked so.
	PhaseInstalled Phase = "installed"
)

// Phases lists the phases in boot order.
var Phases = []Phase{PhaseDHCP, PhaseScript, PhaseAgentAssets, PhaseAgentRegistered, PhaseHandoff, PhaseInstalled}

// Mark is one phase of a boot, when it happened.
type Mark struct {
	Phase Phase
	At    time.Time
	// Detail says how: the DHCP server (proxy, dhcp), the boot decision of a script
	// (agent, talos, disk), the handoff (ipxe, kexec), who said installed.
	Detail string
	// Firmware is what the mark's source saw of the machine's firmware (bios, uefi); ""
	// when it did not say.
	Firmware string
}

// Event is something that happened to a machine, in words.
type Event struct {
	At      time.Time
	Message string
}

// Bounds of what is kept.
const (
	// MaxEvents is how many events are kept per machine.
	MaxEvents = 50
	// maxMessage bounds an event's text (an agent's failure message may be long).
	maxMessage = 256
	// forgetAfter: a machine not heard of for this long is forgotten.
	forgetAfter = 24 * time.Hour
	// staleAfter: a DHCP or script mark this long after a boot's last mark starts a new
	// boot even when it does not follow a later phase (a machine that stopped in its
	// firmware, or DHCP offers nobody followed).
	staleAfter = 30 * time.Minute
	// heldFor is how long a DHCP offer waits, by MAC, for its boot script, and how long a
	// script's address names its machine for the asset requests that follow.
	heldFor = 10 * time.Minute
	// maxMachines and maxHeld bound the maps: beyond them new entries are dropped (after
	// a sweep of stale ones), so a flood of made-up IDs costs no more memory.
	maxMachines = 16384
	maxHeld     = 16384
	// sweepEvery bounds how often the maps are swept of stale entries.
	sweepEvery = time.Minute
)

// Firmware kinds, as the histogram labels them.
var firmwares = [...]string{"bios", "uefi", "unknown"}

// Recorder keeps the timelines. A nil *Recorder is valid and records nothing.
type Recorder struct {
	now func() time.Time
	// observers[phase][firmware] are the histogram's children, resolved once.
	observers [len(phaseNames)][len(firmwares)]prometheus.Observer

	mu       sync.Mutex
	machines map[string]*machine
	// dhcp holds DHCP offers by client MAC until a boot script names the machine.
	dhcp map[string]heldDHCP
	// addrs names the machine that last fetched its boot script from an IP address.
	addrs map[string]heldAddr
	// changed is closed and replaced on every change; nil until someone asks for it.
	changed   chan struct{}
	lastSweep time.Time
}

type machine struct {
	// boot holds the current boot's marks, boot[:marks]: a boot marks each phase at most
	// once, in order, so they fit in place and a new boot reuses them.
	boot     [len(phaseNames)]Mark
	marks    int
	firmware string // of the current boot, once a mark said
	events   []event
	next     int // where the next event goes once events is full (a ring)
	seen     time.Time
}

// event is an Event as kept: a mark's words are put together when read, not on the
// boot services' hot path.
type event struct {
	at time.Time
	// text is a note's message, or a mark's detail.
	text string
	// phase is the mark's phase index plus one; 0 for a note.
	phase int8
	// firmware is the mark's firmwares index.
	firmware int8
}

type heldDHCP struct {
	at                   time.Time
	id, firmware, detail string
}

type heldAddr struct {
	at time.Time
	id string
}

// New returns a recorder whose histogram is registered with reg (none when nil).
func New(reg prometheus.Registerer) *Recorder {
	hist := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "anvil_boot_phase_duration_seconds",
		Help: "Time from a boot phase to the next one of the same boot, by the phase reached and the firmware (bios, uefi, unknown).",
		// From a fast script fetch to an install on slow emulated hardware.
		Buckets: []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800},
	}, []string{"phase", "firmware"})

	r := &Recorder{
		now:      time.Now,
		machines: map[string]*machine{},
		dhcp:     map[string]heldDHCP{},
		addrs:    map[string]heldAddr{},
	}

	// Every child exists from the start (a dashboard finds every series at 0); the first
	// phase of a boot is never observed, as nothing comes before it.
	for i, p := range Phases {
		for j, fw := range firmwares {
			if i > 0 {
				r.observers[i][j] = hist.WithLabelValues(string(p), fw)
			}
		}
	}

	if reg != nil {
		reg.MustRegister(hist)
	}

	return r
}

// Mark records that the machine reached phase now. firmware is bios or uefi when the
// caller knows it ("" takes the boot's); detail says how (see Mark.Detail).
func (r *Recorder) Mark(machineID string, phase Phase, firmware, detail string) {
	if r == nil {
		return
	}

	r.mu.Lock()
	defer r.mu.Unlock()

	r.mark(machineID, phase, firmware, detail, r.now())
}

// MarkDHCP records a DHCP offer with boot options sent to the client with the MAC:
// under machineID at once when the client's own identifier named it ("" when it did
// not), and held by MAC until MarkScript joins it to the machine whose boot script that
// MAC fetches.
func (r *Recorder) MarkDHCP(mac, machineID, firmware, detail string) {
	if r == nil || mac == "" {
		return
	}

	r.mu.Lock()
	defer r.mu.Unlock()

	at := r.now()

	if machineID != "" {
		r.mark(machineID, PhaseDHCP, firmware, detail, at)
	}

	// The first offer of a boot is when it began: the firmware's, not iPXE's after it.
	if h, ok := r.dhcp[mac]; ok && at.Sub(h.at) <= heldFor {
		return
	}

	if _, ok := r.dhcp[mac]; !ok && len(r.dhcp) >= maxHeld {
		r.sweep(at)

		if len(r.dhcp) >= maxHeld {
			return
		}
	}

	r.dhcp[mac] = heldDHCP{at: at, id: machineID, firmware: firmware, detail: detail}
}

// MarkScript records that the machine fetched its boot script from the MAC (iPXE's
// booting NIC) at the IP address addr; detail is the boot decision. A DHCP offer held
// for the MAC becomes the start of the boot, and addr names the machine for MarkFrom.
func (r *Recorder) MarkScript(machineID, mac, addr, firmware, detail string) {
	if r == nil {
		return
	}

	r.mu.Lock()
	defer r.mu.Unlock()

	at := r.now()

	if h, ok := r.dhcp[mac]; ok {
		delete(r.dhcp, mac)

		// An offer marked under this machine already (its identifier named it) is not
		// marked twice.
		if at.Sub(h.at) <= heldFor && h.id != machineID {
			r.mark(machineID, PhaseDHCP, h.firmware, h.detail, h.at)
		}
	}

	r.mark(machineID, PhaseScript, firmware, detail, at)

	if addr == "" || r.machines[machineID] == nil {
		return
	}

	if _, ok := r.addrs[addr]; !ok && len(r.addrs) >= maxHeld {
		r.sweep(at)

		if len(r.addrs) >= maxHeld {
			return
		}
	}

	r.addrs[addr] = heldAddr{at: at, id: machineID}
}

// MarkFrom records the phase for the machine that last fetched its boot script from the
// IP address addr (the agent's assets carry no machine ID: iPXE fetches them from the
// address it fetched the script from). Nothing is marked for an address no script came
// from lately.
func (r *Recorder) MarkFrom(addr string, phase Phase, detail string) {
	if r == nil {
		return
	}

	r.mu.Lock()
	defer r.mu.Unlock()

	at := r.now()

	h, ok := r.addrs[addr]
	if !ok || at.Sub(h.at) > heldFor {
		return
	}

	r.mark(h.id, phase, "", detail, at)
}

// Note adds an event to the machine's recent events.
func (r *Recorder) Note(machineID, message string) {
	if r == nil || machineID == "" {
		return
	}

	r.mu.Lock()
	defer r.mu.Unlock()

	at := r.now()

	m := r.machine(machineID, at)
	if m == nil {
		return
	}

	m.note(event{at: at, text: clip(message)})
	r.broadcast()
}

// Timeline returns the machine's current (or latest) boot, in phase order; nil when none
// is known.
func (r *Recorder) Timeline(machineID string) []Mark {
	if r == nil {
		return nil
	}

	r.mu.Lock()
	defer r.mu.Unlock()

	m := r.machines[machineID]
	if m == nil || m.marks == 0 {
		return nil
	}

	return append([]Mark(nil), m.boot[:m.marks]...)
}

// Events returns the machine's recent events, newest first (at most MaxEvents).
func (r *Recorder) Events(machineID string) []Event {
	if r == nil {
		return nil
	}

	r.mu.Lock()
	defer r.mu.Unlock()

	m := r.machines[machineID]
	if m == nil || len(m.events) == 0 {
		return nil
	}

	out := make([]Event, 0, len(m.events))

	// The ring's newest is just before next (the end, while it is not full).
	newest := len(m.events) - 1
	if len(m.events) == MaxEvents {
		newest = (m.next + MaxEvents - 1) % MaxEvents
	}

	for i := range len(m.events) {
		out = append(out, m.events[(newest-i+len(m.events))%len(m.events)].words())
	}

	return out
}

// Changed returns a channel closed at the next change of any timeline or events (nil,
// never closed, for a nil Recorder).
func (r *Recorder) Changed() <-chan struct{} {
	if r == nil {
		return nil
	}

	r.mu.Lock()
	defer r.mu.Unlock()

	if r.changed == nil {
		r.changed = make(chan struct{})
	}

	return r.changed
}
