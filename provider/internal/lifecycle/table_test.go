package lifecycle_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/provider/internal/lifecycle"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// policy is the operator's choice every row is decided under.
var policy = lifecycle.Policy{
	ProvisionBMC: true, IdlePower: resources.PowerOff, RejectedThen: lifecycle.RejectedReboot, WipeMode: resources.WipeModeFast,
}

// row is one line of DESIGN.md's boot decision table (and the lifecycle around it): a
// machine's resources, and what every part of the provider must make of them.
type row struct {
	name string
	// known: the machine booted before (a Machine resource exists).
	known  bool
	intent *resources.MachineIntentSpec
	status *resources.MachineStatusSpec
	bmc    *resources.BMCConfigSpec

	phase lifecycle.Phase
	boot  lifecycle.Boot
	order string
	power resources.PowerState
}

func (r row) machine(id string) lifecycle.Machine {
	m := lifecycle.Machine{ID: id, Intent: r.intent, Status: r.status, BMC: r.bmc}
	if r.known {
		m.Machine = &resources.MachineSpec{UUID: id}
	}

	return m
}

var (
	alloc = &resources.Allocation{ID: "a1", TalosVersion: "v1.9.0", SchematicID: strings.Repeat("1", 64)}
	// userBMC is a BMC whose credentials a person gave: nothing to provision.
	userBMC = &resources.BMCConfigSpec{Kind: "ipmi", Address: "10.0.0.5", Username: "admin", HasPassword: true, Source: resources.BMCSourceUser}
	// addressOnly is a BMC whose address a person gave: the agent provisions the credentials.
	addressOnly = &resources.BMCConfigSpec{Kind: "ipmi", Address: "10.0.0.5", Source: resources.BMCSourceUser}
)

func accepted(change func(*resources.MachineIntentSpec)) *resources.MachineIntentSpec {
	s := &resources.MachineIntentSpec{Acceptance: resources.AcceptanceAccepted, Power: resources.PowerDefault, WipeID: "w1"}
	if change != nil {
		change(s)
	}

	return s
}

func wiped(id string, change func(*resources.MachineStatusSpec)) *resources.MachineStatusSpec {
	s := &resources.MachineStatusSpec{WipedID: id, Power: resources.PowerUnknown}
	if change != nil {
		change(s)
	}

	return s
}

func allocated(s *resources.MachineIntentSpec) { s.Allocation = alloc }

// failedHandoff: the agent said the kexec into a1 failed.
func failedHandoff(s *resources.MachineStatusSpec) {
	s.Handoff = &resources.HandoffRecord{AllocationID: "a1", OrderedAt: time.Now(), Failure: "digest mismatch"}
}

// talosExtensionAgent: the machine's agent runs as a Talos extension, which cannot kexec.
func talosExtensionAgent(s *resources.MachineStatusSpec) {
	s.AgentKexecUnavailable = "the agent runs as a Talos extension"
	s.KexecBlockers = []string{"agent: " + s.AgentKexecUnavailable}
}

func installedUnder(id string) func(*resources.MachineStatusSpec) {
	return func(s *resources.MachineStatusSpec) { s.InstalledAllocation = id }
}

// designTable is DESIGN.md's table, row for row, with the cases around its edges.
var designTable = []row{
	{name: "unknown", phase: lifecycle.PhaseUnknown, boot: lifecycle.BootAgent, order: "hold-pending"},
	{name: "pending", known: true, bmc: userBMC, phase: lifecycle.PhasePending, boot: lifecycle.BootAgent, order: "hold-pending"},
	{
		name: "pending with an allocation never boots Talos", known: true, bmc: userBMC,
		intent: &resources.MachineIntentSpec{Acceptance: resources.AcceptancePending, Allocation: alloc},
		phase:  lifecycle.PhasePending, boot: lifecycle.BootAgent, order: "hold-pending",
	},
	{
		name: "rejected", known: true, bmc: userBMC, intent: &resources.MachineIntentSpec{Acceptance: resources.AcceptanceRejected},
		phase: lifecycle.PhaseRejected, boot: lifecycle.BootDisk, order: "release-rejected",
	},
	{
		name: "rejected with a wipe owed is never wiped", known: true, bmc: userBMC,
		intent: &resources.MachineIntentSpec{Acceptance: resources.AcceptanceRejected, WipeID: "w1"},
		phase:  lifecycle.PhaseRejected, boot: lifecycle.BootDisk, order: "release-rejected",
	},
	{
		name: "accepted, wipe owed", known: true, bmc: userBMC, intent: accepted(nil),
		phase: lifecycle.PhasePreparing, boot: lifecycle.BootAgent, order: "wipe-w1", power: resources.PowerOn,
	},
	{
		name: "accepted, BMC not yet provisioned", known: true, bmc: addressOnly, intent: accepted(nil), status: wiped("w1", nil),
		phase: lifecycle.PhasePreparing, boot: lifecycle.BootAgent, order: lifecycle.BMCOrderID, power: resources.PowerOn,
	},
	{
		name: "accepted, BMC provisioning answered (failed)", known: true, bmc: addressOnly, intent: accepted(nil),
		status: wiped("w1", func(s *resources.MachineStatusSpec) { s.BMCOrder, s.BMCError = lifecycle.BMCOrderID, "no /dev/ipmi0" }),
		phase:  lifecycle.PhaseReady, boot: lifecycle.BootAgent, order: "hold-ready", power: resources.PowerOff,
	},
	{
		name: "accepted, BMC provisioned and wipe owed: credentials first", known: true, bmc: addressOnly, intent: accepted(nil),
		phase: lifecycle.PhasePreparing, boot: lifecycle.BootAgent, order: lifecycle.BMCOrderID, power: resources.PowerOn,
	},
	{
		name: "accepted, not allocated", known: true, bmc: userBMC, intent: accepted(nil), status: wiped("w1", nil),
		phase: lifecycle.PhaseReady, boot: lifecycle.BootAgent, order: "hold-ready", power: resources.PowerOff,
	},
	{
		name: "accepted, not allocated, cordoned", known: true, bmc: userBMC,
		intent: accepted(func(s *resources.MachineIntentSpec) { s.Cordoned = true }), status: wiped("w1", nil),
		phase: lifecycle.PhaseReady, boot: lifecycle.BootAgent, order: "hold-ready", power: resources.PowerOff,
	},
	{
		name: "accepted, not allocated, user wants it on", known: true, bmc: userBMC,
		intent: accepted(func(s *resources.MachineIntentSpec) { s.Power = resources.PowerOn }), status: wiped("w1", nil),
		phase: lifecycle.PhaseReady, boot: lifecycle.BootAgent, order: "hold-ready", power: resources.PowerOn,
	},
	{
		name: "allocated, not installed: kexec from the agent", known: true, bmc: userBMC, intent: accepted(allocated), status: wiped("w1", nil),
		phase: lifecycle.PhaseAllocated, boot: lifecycle.BootTalos, order: "kexec-a1", power: resources.PowerOn,
	},
	{
		name: "allocated, kexec never for this machine: reboot", known: true, bmc: userBMC,
		intent: accepted(func(s *resources.MachineIntentSpec) { allocated(s); s.Kexec = resources.KexecNever }), status: wiped("w1", nil),
		phase: lifecycle.PhaseAllocated, boot: lifecycle.BootTalos, order: "boot-allocation-a1", power: resources.PowerOn,
	},
	{
		name: "allocated, hardware on the kexec deny list: reboot", known: true, bmc: userBMC, intent: accepted(allocated),
		status: wiped("w1", func(s *resources.MachineStatusSpec) { s.KexecBlockers = []string{"nvidia: GPU not reset"} }),
		phase:  lifecycle.PhaseAllocated, boot: lifecycle.BootTalos, order: "boot-allocation-a1", power: resources.PowerOn,
	},
	{
		name: "allocated, deny list overridden by kexec always", known: true, bmc: userBMC,
		intent: accepted(func(s *resources.MachineIntentSpec) { allocated(s); s.Kexec = resources.KexecAlways }),
		status: wiped("w1", func(s *resources.MachineStatusSpec) { s.KexecBlockers = []string{"nvidia: GPU not reset"} }),
		phase:  lifecycle.PhaseAllocated, boot: lifecycle.BootTalos, order: "kexec-a1", power: resources.PowerOn,
	},
	{
		name: "allocated, kexec always, the agent a Talos extension (agent-mode Talos): reboot", known: true, bmc: userBMC,
		intent: accepted(func(s *resources.MachineIntentSpec) { allocated(s); s.Kexec = resources.KexecAlways }),
		status: wiped("w1", talosExtensionAgent),
		phase:  lifecycle.PhaseAllocated, boot: lifecycle.BootTalos, order: "boot-allocation-a1", power: resources.PowerOn,
	},
	{
		name: "allocated, kexec failed: the agent reboots it through the firmware", known: true, bmc: userBMC, intent: accepted(allocated),
		status: wiped("w1", failedHandoff),
		phase:  lifecycle.PhaseAllocated, boot: lifecycle.BootTalos, order: "boot-allocation-a1", power: resources.PowerOn,
	},
	{
		name: "allocated while a wipe is owed: the wipe first", known: true, bmc: userBMC, intent: accepted(allocated),
		phase: lifecycle.PhaseAllocated, boot: lifecycle.BootAgent, order: "wipe-w1", power: resources.PowerOn,
	},
	{
		name: "allocated, installed under an earlier allocation", known: true, bmc: userBMC, intent: accepted(allocated),
		status: wiped("w1", installedUnder("a0")),
		phase:  lifecycle.PhaseAllocated, boot: lifecycle.BootTalos, order: "kexec-a1", power: resources.PowerOn,
	},
	{
		name: "allocated, user says off", known: true, bmc: userBMC,
		intent: accepted(func(s *resources.MachineIntentSpec) { allocated(s); s.Power = resources.PowerOff }), status: wiped("w1", nil),
		phase: lifecycle.PhaseAllocated, boot: lifecycle.BootTalos, order: "kexec-a1", power: resources.PowerOff,
	},
	{
		name: "allocated and installed", known: true, bmc: userBMC, intent: accepted(allocated), status: wiped("w1", installedUnder("a1")),
		phase: lifecycle.PhaseInstalled, boot: lifecycle.BootDisk, order: "boot-disk-a1", power: resources.PowerOn,
	},
	{
		name: "installed with another wipe id is never wiped", known: true, bmc: userBMC,
		intent: accepted(func(s *resources.MachineIntentSpec) { allocated(s); s.WipeID = "w2" }), status: wiped("w1", installedUnder("a1")),
		phase: lifecycle.PhaseInstalled, boot: lifecycle.BootDisk, order: "boot-disk-a1", power: resources.PowerOn,
	},
	{
		name: "installed is never held back for BMC provisioning", known: true, bmc: addressOnly, intent: accepted(allocated),
		status: wiped("w1", installedUnder("a1")),
		phase:  lifecycle.PhaseInstalled, boot: lifecycle.BootDisk, order: "boot-disk-a1", power: resources.PowerOn,
	},
	{
		name: "deallocated: wipe owed", known: true, bmc: userBMC,
		intent: accepted(func(s *resources.MachineIntentSpec) { s.WipeID = "w2" }), status: wiped("w1", installedUnder("a1")),
		phase: lifecycle.PhasePreparing, boot: lifecycle.BootAgent, order: "wipe-w2", power: resources.PowerOn,
	},
	{
		name: "deallocated and wiped: available again", known: true, bmc: userBMC,
		intent: accepted(func(s *resources.MachineIntentSpec) { s.WipeID = "w2" }), status: wiped("w2", installedUnder("a1")),
		phase: lifecycle.PhaseReady, boot: lifecycle.BootAgent, order: "hold-ready", power: resources.PowerOff,
	},
}

// rowID is the machine ID of the table's row i.
func rowID(i int) string { return fmt.Sprintf("4c4c4544-0000-1000-8000-%012d", i+1) }

// TestDesignTable runs every row through the rules themselves; TestDesignTableCallers
// sends the same rows through the provider's parts that act on them.
func TestDesignTable(t *testing.T) {
	t.Parallel()

	for i, r := range designTable {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()

			m := r.machine(rowID(i))

			assert.Equal(t, r.phase, m.Phase(policy), "phase")

			d := m.Boot(policy)
			assert.Equal(t, r.boot, d.Boot, "boot: %s", d.Reason)
			assert.NotEmpty(t, d.Reason)
			assert.Equal(t, d.Boot == lifecycle.BootTalos, d.Allocation != nil, "a Talos boot carries its allocation")

			assert.Equal(t, r.order, m.NextOrder(policy).ID, "order")
			assert.Equal(t, r.power, m.DesiredPower(policy), "desired power")
		})
	}
}

// TestPolicy: what the operator's choices change.
func TestPolicy(t *testing.T) {
	t.Parallel()

	ready := lifecycle.Machine{ID: "m", Machine: &resources.MachineSpec{}, BMC: userBMC, Intent: accepted(nil), Status: wiped("w1", nil)}
	noBMC := lifecycle.Machine{ID: "m", Machine: &resources.MachineSpec{}, Intent: accepted(nil), Status: wiped("w1", nil)}
	rejected := lifecycle.Machine{ID: "m", Machine: &resources.MachineSpec{}, Intent: &resources.MachineIntentSpec{Acceptance: resources.AcceptanceRejected}}
	owing := lifecycle.Machine{ID: "m", Machine: &resources.MachineSpec{}, BMC: userBMC, Intent: accepted(func(s *resources.MachineIntentSpec) { s.WipeMode = resources.WipeModeZeroes })}

	idleOn := policy
	idleOn.IdlePower = resources.PowerOn
	assert.Equal(t, resources.PowerOn, ready.DesiredPower(idleOn), "idle on")

	noProvisioning := policy
	noProvisioning.ProvisionBMC = false
	assert.Equal(t, lifecycle.PhaseReady, noBMC.Phase(noProvisioning), "no BMC provisioning: nothing owed")
	assert.Equal(t, "hold-ready", noBMC.NextOrder(noProvisioning).ID)
	assert.Equal(t, lifecycle.OrderProvisionBMC, noBMC.NextOrder(policy).Kind)
	assert.Equal(t, lifecycle.BMCUser, noBMC.NextOrder(policy).BMCUser)

	for _, tc := range []struct {
		name      string
		tweak     func(*lifecycle.Policy)
		remove    bool
		then      lifecycle.RejectedAction
		wipeMode  string
		removable bool
	}{
		{"defaults", func(*lifecycle.Policy) {}, false, lifecycle.RejectedReboot, resources.WipeModeZeroes, false},
		{"power off, removable", func(p *lifecycle.Policy) { p.RejectedThen, p.WipeRemovable = lifecycle.RejectedPowerOff, true }, true, lifecycle.RejectedPowerOff, resources.WipeModeZeroes, true},
	} {
		p := policy
		tc.tweak(&p)

		assert.Equal(t, tc.then, rejected.NextOrder(p).Then, tc.name)

		o := owing.NextOrder(p)
		assert.Equal(t, lifecycle.OrderWipe, o.Kind, tc.name)
		assert.Equal(t, tc.wipeMode, o.Wipe.Mode, "a machine's own wipe mode wins: %s", tc.name)
		assert.Equal(t, tc.removable, o.Wipe.IncludeRemovable, tc.name)
		assert.Equal(t, "w1", o.Wipe.GenerationID, tc.name)
	}

	o := lifecycle.Machine{ID: "m", Machine: &resources.MachineSpec{}, BMC: userBMC, Intent: accepted(nil)}.NextOrder(policy)
	assert.Equal(t, resources.WipeModeFast, o.Wipe.Mode, "the provider's mode otherwise")
	assert.Equal(t, resources.WipeScopeAll, o.Wipe.Scope, "all disks by default")
}

// TestWipeScope: a machine's own scope wins over the provider's; the install-disk scope
// names the disk the machine last installed to, else the one being allocated, else the
// provider's install disk selector.
func TestWipeScope(t *testing.T) {
	t.Parallel()

	allocated := &resources.Allocation{ID: "a1", InstallDisk: &resources.InstallDisk{Selector: "type=nvme", Identity: "serial=NEW"}}

	for _, tc := range []struct {
		name                    string
		policy                  lifecycle.Policy
		intent                  resources.MachineIntentSpec
		wantScope, wantSelector string
	}{
		{name: "all by default", wantScope: "all"},
		{
			name:      "the provider's keep selector",
			policy:    lifecycle.Policy{WipeScope: "all-except", WipeKeep: "model=ST16000*"},
			wantScope: "all-except", wantSelector: "model=ST16000*",
		},
		{
			name:      "the machine's scope wins, with its own selector",
			policy:    lifecycle.Policy{WipeScope: "all-except", WipeKeep: "model=ST16000*"},
			intent:    resources.MachineIntentSpec{WipeScope: "all-except", WipeKeep: "serial=DATA1"},
			wantScope: "all-except", wantSelector: "serial=DATA1",
		},
		{
			name:      "the machine's all wins over the provider's scope",
			policy:    lifecycle.Policy{WipeScope: "all-except", WipeKeep: "model=ST16000*"},
			intent:    resources.MachineIntentSpec{WipeScope: "all"},
			wantScope: "all",
		},
		{
			name:      "install disk: the one last installed to",
			policy:    lifecycle.Policy{WipeScope: "install-disk", InstallDisk: "type=nvme,pick=smallest"},
			intent:    resources.MachineIntentSpec{InstallDisk: "serial=OLD", Allocation: allocated},
			wantScope: "install-disk", wantSelector: "serial=OLD",
		},
		{
			name:      "install disk: the one being allocated",
			policy:    lifecycle.Policy{WipeScope: "install-disk", InstallDisk: "type=nvme,pick=smallest"},
			intent:    resources.MachineIntentSpec{Allocation: allocated},
			wantScope: "install-disk", wantSelector: "serial=NEW",
		},
		{
			name:      "install disk: the provider's selector for a machine never allocated",
			policy:    lifecycle.Policy{WipeScope: "install-disk", InstallDisk: "type=nvme,pick=smallest"},
			wantScope: "install-disk", wantSelector: "type=nvme,pick=smallest",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			intent := tc.intent
			intent.Acceptance, intent.WipeID = resources.AcceptanceAccepted, "w2"

			m := lifecycle.Machine{ID: "m", Machine: &resources.MachineSpec{}, BMC: userBMC, Intent: &intent, Status: wiped("w1", nil)}

			o := m.NextOrder(tc.policy)
			require.Equal(t, lifecycle.OrderWipe, o.Kind)
			assert.Equal(t, tc.wantScope, o.Wipe.Scope)
			assert.Equal(t, tc.wantSelector, o.Wipe.Selector)
		})
	}
}

func TestNeedsBMCCredentials(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name string
		cfg  *resources.BMCConfigSpec
		want bool
	}{
		{"none", nil, true},
		{"address only", addressOnly, true},
		{"kind-less address", &resources.BMCConfigSpec{Address: "10.0.0.5"}, true},
		{"user credentials", userBMC, false},
		{"redfish", &resources.BMCConfigSpec{Kind: "redfish", Address: "10.0.0.5"}, false},
		{"power API", &resources.BMCConfigSpec{Kind: "api", Address: "http://x"}, false},
		{"manual", &resources.BMCConfigSpec{Kind: "none"}, false},
	} {
		assert.Equal(t, tc.want, lifecycle.NeedsBMCCredentials(tc.cfg), tc.name)
	}
}

func TestAllocatable(t *testing.T) {
	t.Parallel()

	for i, r := range designTable {
		m := r.machine(rowID(i))
		want := r.phase == lifecycle.PhaseReady && (r.intent == nil || !r.intent.Cordoned)
		assert.Equal(t, want, m.Allocatable(policy), r.name)
	}
}

// TestHandoff: a kexec handoff is given up when the agent says it failed, or when Talos
// is not seen up by the deadline; seen up, or installed, it stands.
func TestHandoff(t *testing.T) {
	t.Parallel()

	ordered := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	p := policy
	p.KexecTimeout = 2 * time.Minute

	handoff := func(change func(*resources.HandoffRecord)) *resources.MachineStatusSpec {
		return wiped("w1", func(s *resources.MachineStatusSpec) {
			s.Handoff = &resources.HandoffRecord{AllocationID: "a1", OrderedAt: ordered}
			if change != nil {
				change(s.Handoff)
			}
		})
	}

	for _, tc := range []struct {
		name     string
		status   *resources.MachineStatusSpec
		now      time.Time
		pending  bool
		fallback string
		reason   string
		// kexecOnly: the configuration goes to the kexec order's token alone.
		kexecOnly bool
	}{
		{name: "no handoff", status: wiped("w1", nil), now: ordered.Add(time.Hour)},
		{name: "ordered, not loaded (the order may have met a session already gone)", status: handoff(nil), now: ordered.Add(time.Minute), pending: true},
		{
			name: "loaded, within the deadline", now: ordered.Add(time.Minute), pending: true, kexecOnly: true,
			status: handoff(func(h *resources.HandoffRecord) { h.LoadedAt = ordered.Add(10 * time.Second) }),
		},
		{
			name: "loaded, past the deadline", now: ordered.Add(2 * time.Minute), pending: true,
			status:   handoff(func(h *resources.HandoffRecord) { h.LoadedAt = ordered.Add(10 * time.Second) }),
			fallback: "handoff-a1", reason: "Talos not seen up 2m0s after the kexec order",
		},
		{
			name: "past the deadline", status: handoff(nil), now: ordered.Add(2 * time.Minute), pending: true,
			fallback: "handoff-a1", reason: "Talos not seen up 2m0s after the kexec order",
		},
		{
			name: "the agent said it failed: its reboot is the fallback", now: ordered.Add(time.Hour),
			status: handoff(func(h *resources.HandoffRecord) { h.Failure = "no kexec_file_load" }),
		},
		{
			name: "Talos seen up", now: ordered.Add(time.Hour), kexecOnly: true,
			status: handoff(func(h *resources.HandoffRecord) {
				h.LoadedAt, h.ConfirmedAt = ordered.Add(10*time.Second), ordered.Add(30*time.Second)
			}),
		},
		{
			name: "installed", now: ordered.Add(time.Hour),
			status: wiped("w1", func(s *resources.MachineStatusSpec) {
				s.Handoff = &resources.HandoffRecord{AllocationID: "a1", OrderedAt: ordered}
				s.InstalledAllocation = "a1"
			}),
		},
		{
			name: "a handoff of an earlier allocation", now: ordered.Add(time.Hour),
			status: wiped("w1", func(s *resources.MachineStatusSpec) {
				s.Handoff = &resources.HandoffRecord{AllocationID: "a0", OrderedAt: ordered, Failure: "x"}
			}),
		},
	} {
		m := lifecycle.Machine{ID: "m", Machine: &resources.MachineSpec{}, BMC: userBMC, Intent: accepted(allocated), Status: tc.status}

		assert.Equal(t, tc.pending, m.HandoffPending(), tc.name)

		if tc.pending {
			assert.Equal(t, ordered.Add(2*time.Minute), m.HandoffDeadline(p), tc.name)
		} else {
			assert.True(t, m.HandoffDeadline(p).IsZero(), tc.name)
		}

		id, reason := m.HandoffFallback(p, tc.now)
		assert.Equal(t, tc.fallback, id, tc.name)
		assert.Equal(t, tc.reason, reason, tc.name)
		assert.Equal(t, tc.kexecOnly, m.KexecHandsOver(p, tc.now), tc.name)
	}
}

// TestKexecMode: the machine's mode wins over the provider's; auto honours the deny list.
func TestKexecMode(t *testing.T) {
	t.Parallel()

	blocked := wiped("w1", func(s *resources.MachineStatusSpec) { s.KexecBlockers = []string{"x"} })
	extension := wiped("w1", talosExtensionAgent)

	for _, tc := range []struct {
		provider, machine string
		status            *resources.MachineStatusSpec
		mode              string
		allowed           bool
	}{
		{"", "", nil, resources.KexecAuto, true},
		{"", "", blocked, resources.KexecAuto, false},
		{resources.KexecNever, "", nil, resources.KexecNever, false},
		{resources.KexecNever, resources.KexecAlways, blocked, resources.KexecAlways, true},
		{resources.KexecAlways, "", blocked, resources.KexecAlways, true},
		{resources.KexecAlways, resources.KexecAuto, blocked, resources.KexecAuto, false},
		{resources.KexecAuto, "bogus", nil, resources.KexecAuto, true},
		// An agent that cannot kexec is not ordered to, whatever the mode.
		{resources.KexecAlways, "", extension, resources.KexecAlways, false},
		{"", resources.KexecAlways, extension, resources.KexecAlways, false},
		{"", "", extension, resources.KexecAuto, false},
	} {
		p := policy
		p.Kexec = tc.provider
		m := lifecycle.Machine{ID: "m", Intent: accepted(func(s *resources.MachineIntentSpec) { s.Kexec = tc.machine }), Status: tc.status}

		assert.Equal(t, tc.mode, m.KexecMode(p), "%+v", tc)
		assert.Equal(t, tc.allowed, m.KexecAllowed(p), "%+v", tc)
	}
}

// TestKeepWarm: a machine that idles powered off stays on for the window after its
// last wipe — not when kexec is never used for it, nor when someone said off.
func TestKeepWarm(t *testing.T) {
	t.Parallel()

	wipedAt := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	p := policy
	p.KeepWarm = 10 * time.Minute

	withWipe := wiped("w1", func(s *resources.MachineStatusSpec) { s.LastWipe = &resources.WipeRecord{ID: "w1", At: wipedAt} })

	for _, tc := range []struct {
		name   string
		intent *resources.MachineIntentSpec
		policy lifecycle.Policy
		now    time.Time
		want   resources.PowerState
	}{
		{"within the window", accepted(nil), p, wipedAt.Add(5 * time.Minute), resources.PowerOn},
		{"after it", accepted(nil), p, wipedAt.Add(10 * time.Minute), resources.PowerOff},
		{"no window", accepted(nil), policy, wipedAt.Add(time.Minute), resources.PowerOff},
		{"someone said off", accepted(func(s *resources.MachineIntentSpec) { s.Power = resources.PowerOff }), p, wipedAt.Add(time.Minute), resources.PowerOff},
		{"kexec never", accepted(func(s *resources.MachineIntentSpec) { s.Kexec = resources.KexecNever }), p, wipedAt.Add(time.Minute), resources.PowerOff},
	} {
		m := lifecycle.Machine{ID: "m", Machine: &resources.MachineSpec{}, BMC: userBMC, Intent: tc.intent, Status: withWipe}

		assert.Equal(t, tc.want, m.DesiredPowerAt(tc.policy, tc.now), tc.name)
	}
}
