package boottrace

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	m1    = "4c4c4544-0000-1000-8000-000000000001"
	m2    = "4c4c4544-0000-1000-8000-000000000002"
	mac1  = "52:54:00:00:00:01"
	addr1 = "10.0.0.11"
)

// clock is a fake time the test moves by hand.
type clock struct{ t time.Time }

func (c *clock) now() time.Time              { return c.t }
func (c *clock) advance(d time.Duration)     { c.t = c.t.Add(d) }
func newClock() *clock                       { return &clock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} }
func at(c *clock, d time.Duration) time.Time { return c.t.Add(d) }

type step struct {
	after time.Duration // the clock moves by this first
	do    func(r *Recorder)
}

type want struct {
	phase  Phase
	after  time.Duration // since the test's start
	detail string
}

type observed struct {
	phase, firmware string
	count           uint64
	sum             float64
}

func TestTimelines(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name     string
		steps    []step
		timeline map[string][]want
		observed []observed
	}{
		{
			name: "an agent boot handed over by kexec, the DHCP offer named by the client's identifier",
			steps: []step{
				{0, func(r *Recorder) { r.MarkDHCP(mac1, m1, "uefi", "proxy") }},
				// iPXE's own DHCP after the firmware's: the boot began at the first.
				{2 * time.Second, func(r *Recorder) { r.MarkDHCP(mac1, m1, "uefi", "proxy") }},
				{time.Second, func(r *Recorder) { r.MarkScript(m1, mac1, addr1, "uefi", "agent") }},
				// iPXE fetching its script again changes nothing.
				{time.Second, func(r *Recorder) { r.MarkScript(m1, mac1, addr1, "uefi", "agent") }},
				{2 * time.Second, func(r *Recorder) { r.MarkFrom(addr1, PhaseAgentAssets, "") }},
				{10 * time.Second, func(r *Recorder) { r.Mark(m1, PhaseAgentRegistered, "", "") }},
				{time.Minute, func(r *Recorder) { r.Mark(m1, PhaseHandoff, "", "kexec") }},
				// The agent's session reconnecting before the jump is not a new boot.
				{time.Second, func(r *Recorder) { r.Mark(m1, PhaseAgentRegistered, "uefi", "") }},
				{2 * time.Minute, func(r *Recorder) { r.Mark(m1, PhaseInstalled, "", "event-sink") }},
			},
			timeline: map[string][]want{m1: {
				{PhaseDHCP, 0, "proxy"}, {PhaseScript, 3 * time.Second, "agent"}, {PhaseAgentAssets, 6 * time.Second, ""},
				{PhaseAgentRegistered, 16 * time.Second, ""}, {PhaseHandoff, 76 * time.Second, "kexec"},
				{PhaseInstalled, 197 * time.Second, "event-sink"},
			}},
			observed: []observed{
				{"script", "uefi", 1, 3}, {"agent-assets", "uefi", 1, 3}, {"agent-registered", "uefi", 1, 10},
				{"handoff", "uefi", 1, 60}, {"installed", "uefi", 1, 121},
			},
		},
		{
			name: "a DHCP offer without the client's identifier joins the machine whose script its MAC fetches",
			steps: []step{
				{0, func(r *Recorder) { r.MarkDHCP(mac1, "", "bios", "dhcp") }},
				{4 * time.Second, func(r *Recorder) { r.MarkScript(m1, mac1, addr1, "bios", "talos") }},
				{0, func(r *Recorder) { r.Mark(m1, PhaseHandoff, "bios", "ipxe") }},
			},
			timeline: map[string][]want{m1: {{PhaseDHCP, 0, "dhcp"}, {PhaseScript, 4 * time.Second, "talos"}, {PhaseHandoff, 4 * time.Second, "ipxe"}}},
			observed: []observed{{"script", "bios", 1, 4}, {"handoff", "bios", 1, 0}},
		},
		{
			name: "an identifier that named another machine: the offer joins by MAC all the same",
			steps: []step{
				{0, func(r *Recorder) { r.MarkDHCP(mac1, m2, "uefi", "proxy") }},
				{time.Second, func(r *Recorder) { r.MarkScript(m1, mac1, addr1, "uefi", "agent") }},
			},
			timeline: map[string][]want{
				m1: {{PhaseDHCP, 0, "proxy"}, {PhaseScript, time.Second, "agent"}},
				m2: {{PhaseDHCP, 0, "proxy"}},
			},
			observed: []observed{{"script", "uefi", 1, 1}},
		},
		{
			name: "a DHCP offer after the install starts a new boot",
			steps: []step{
				{0, func(r *Recorder) { r.MarkScript(m1, mac1, addr1, "uefi", "talos") }},
				{0, func(r *Recorder) { r.Mark(m1, PhaseHandoff, "", "ipxe") }},
				{time.Minute, func(r *Recorder) { r.Mark(m1, PhaseInstalled, "", "event-sink") }},
				{time.Minute, func(r *Recorder) { r.MarkDHCP(mac1, m1, "uefi", "proxy") }},
				{time.Second, func(r *Recorder) { r.MarkScript(m1, mac1, addr1, "uefi", "disk") }},
			},
			timeline: map[string][]want{m1: {{PhaseDHCP, 2 * time.Minute, "proxy"}, {PhaseScript, 2*time.Minute + time.Second, "disk"}}},
			observed: []observed{{"handoff", "uefi", 1, 0}, {"installed", "uefi", 1, 60}, {"script", "uefi", 1, 1}},
		},
		{
			name: "a script fetched again after the handoff, without DHCP, starts a new boot",
			steps: []step{
				{0, func(r *Recorder) { r.MarkScript(m1, mac1, addr1, "bios", "talos") }},
				{0, func(r *Recorder) { r.Mark(m1, PhaseHandoff, "", "ipxe") }},
				{time.Minute, func(r *Recorder) { r.MarkScript(m1, mac1, addr1, "bios", "disk") }},
			},
			timeline: map[string][]want{m1: {{PhaseScript, time.Minute, "disk"}}},
			observed: []observed{{"handoff", "bios", 1, 0}},
		},
		{
			name: "a stale DHCP offer is not the start of a boot a script begins much later",
			steps: []step{
				{0, func(r *Recorder) { r.MarkDHCP(mac1, m1, "uefi", "proxy") }},
				{time.Hour, func(r *Recorder) { r.MarkScript(m1, "52:54:00:00:00:99", addr1, "uefi", "agent") }},
				{time.Second, func(r *Recorder) { r.MarkFrom(addr1, PhaseAgentAssets, "") }},
			},
			timeline: map[string][]want{m1: {{PhaseScript, time.Hour, "agent"}, {PhaseAgentAssets, time.Hour + time.Second, ""}}},
			observed: []observed{{"agent-assets", "uefi", 1, 1}},
		},
		{
			name: "an offer held by MAC too long is not joined",
			steps: []step{
				{0, func(r *Recorder) { r.MarkDHCP(mac1, "", "uefi", "proxy") }},
				{heldFor + time.Second, func(r *Recorder) { r.MarkScript(m1, mac1, addr1, "uefi", "agent") }},
			},
			timeline: map[string][]want{m1: {{PhaseScript, heldFor + time.Second, "agent"}}},
		},
		{
			name: "assets from an address no script came from, or long ago, mark nothing",
			steps: []step{
				{0, func(r *Recorder) { r.MarkFrom(addr1, PhaseAgentAssets, "") }},
				{0, func(r *Recorder) { r.MarkScript(m1, mac1, addr1, "uefi", "agent") }},
				{heldFor + time.Second, func(r *Recorder) { r.MarkFrom(addr1, PhaseAgentAssets, "") }},
				{0, func(r *Recorder) { r.MarkFrom("10.0.0.99", PhaseAgentAssets, "") }},
			},
			timeline: map[string][]want{m1: {{PhaseScript, 0, "agent"}}},
		},
		{
			name: "a machine first heard of by its agent, and nonsense, mark what they can",
			steps: []step{
				{0, func(r *Recorder) { r.Mark(m1, PhaseAgentRegistered, "bios", "") }},
				{time.Second, func(r *Recorder) { r.Mark(m1, Phase("reboot"), "bios", "") }},
				{time.Second, func(r *Recorder) { r.Mark("", PhaseHandoff, "bios", "") }},
				{time.Second, func(r *Recorder) { r.Mark(m1, PhaseHandoff, "efi?", "kexec") }},
			},
			timeline: map[string][]want{m1: {{PhaseAgentRegistered, 0, ""}, {PhaseHandoff, 3 * time.Second, "kexec"}}},
			observed: []observed{{"handoff", "bios", 1, 3}},
		},
		{
			name: "an unknown firmware is labelled so",
			steps: []step{
				{0, func(r *Recorder) { r.MarkScript(m1, mac1, addr1, "", "agent") }},
				{time.Second, func(r *Recorder) { r.MarkFrom(addr1, PhaseAgentAssets, "") }},
			},
			timeline: map[string][]want{m1: {{PhaseScript, 0, "agent"}, {PhaseAgentAssets, time.Second, ""}}},
			observed: []observed{{"agent-assets", "unknown", 1, 1}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			reg := prometheus.NewRegistry()
			r := New(reg)
			c := newClock()
			r.now = c.now
			start := c.t

			for _, s := range tc.steps {
				c.advance(s.after)
				s.do(r)
			}

			for id, marks := range tc.timeline {
				got := r.Timeline(id)
				require.Len(t, got, len(marks), "%s: %v", id, got)

				for i, w := range marks {
					assert.Equal(t, w.phase, got[i].Phase, "%s mark %d", id, i)
					assert.Equal(t, start.Add(w.after), got[i].At, "%s mark %d", id, i)
					assert.Equal(t, w.detail, got[i].Detail, "%s mark %d", id, i)
				}
			}

			assert.ElementsMatch(t, tc.observed, observations(t, reg))
		})
	}
}

// observations are the histogram's children that observed something.
func observations(t *testing.T, reg *prometheus.Registry) []observed {
	t.Helper()

	families, err := reg.Gather()
	require.NoError(t, err)

	var out []observed

	for _, f := range families {
		if f.GetName() != "anvil_boot_phase_duration_seconds" {
			continue
		}

		for _, m := range f.GetMetric() {
			if h := m.GetHistogram(); h.GetSampleCount() > 0 {
				out = append(out, observed{label(m, "phase"), label(m, "firmware"), h.GetSampleCount(), h.GetSampleSum()})
			}
		}
	}

	return out
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}

	return ""
}

func TestEveryChildExistsFromTheStart(t *testing.T) {
	t.Parallel()

	reg := prometheus.NewRegistry()
	New(reg)

	families, err := reg.Gather()
	require.NoError(t, err)
	require.Len(t, families, 1)

	var got []string
	for _, m := range families[0].GetMetric() {
		got = append(got, label(m, "phase")+"/"+label(m, "firmware"))
	}

	assert.Len(t, got, (len(Phases)-1)*len(firmwares), "every phase but the first, for every firmware")
	assert.Contains(t, got, "installed/unknown")
	assert.NotContains(t, got, "dhcp/uefi", "the first phase of a boot is never timed")
}

func TestEvents(t *testing.T) {
	t.Parallel()

	r := New(nil)
	c := newClock()
	r.now = c.now

	r.MarkDHCP(mac1, m1, "uefi", "proxy")
	c.advance(time.Second)
	r.MarkScript(m1, mac1, addr1, "uefi", "agent")
	c.advance(time.Second)
	r.Note(m1, "accepted")

	assert.Equal(t, []Event{
		{At: at(c, 0), Message: "accepted"},
		{At: at(c, -time.Second), Message: "boot script fetched (agent, uefi)"},
		{At: at(c, -2*time.Second), Message: "DHCP offer (proxy, uefi)"},
	}, r.Events(m1), "newest first")

	for i := range MaxEvents + 7 {
		c.advance(time.Second)
		r.Note(m1, fmt.Sprint("note ", i))
	}

	events := r.Events(m1)
	require.Len(t, events, MaxEvents, "bounded")
	assert.Equal(t, fmt.Sprint("note ", MaxEvents+6), events[0].Message)
	assert.Equal(t, "note 7", events[MaxEvents-1].Message)

	r.Note(m2, strings.Repeat("é", maxMessage))
	assert.LessOrEqual(t, len(r.Events(m2)[0].Message), maxMessage+len("…"), "long messages are clipped")
	assert.True(t, strings.HasSuffix(r.Events(m2)[0].Message, "é…"), "on a rune boundary")

	assert.Nil(t, r.Events("4c4c4544-0000-1000-8000-0000000000ff"))
	assert.Nil(t, r.Timeline(m2), "a machine with events and no boot has no timeline")
}

// TestEventWords: a mark's event tells its phase, detail and firmware as they were given.
func TestEventWords(t *testing.T) {
	t.Parallel()

	long := strings.Repeat("x", maxMessage)

	for _, tc := range []struct {
		name             string
		phase            Phase
		firmware, detail string
		want             string
	}{
		{"detail and firmware", PhaseScript, "uefi", "agent", "boot script fetched (agent, uefi)"},
		{"detail", PhaseHandoff, "", "kexec", "handed to Talos (kexec)"},
		{"firmware", PhaseAgentRegistered, "bios", "", "agent registered (bios)"},
		{"neither", PhaseInstalled, "", "", "Talos installed"},
		{"an unknown firmware is left out", PhaseDHCP, "efi?", "proxy", "DHCP offer (proxy)"},
		{"a long detail is clipped", PhaseInstalled, "uefi", long, clip("Talos installed (" + long + ", uefi)")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			r := New(nil)
			c := newClock()
			r.now = c.now

			r.Mark(m1, tc.phase, tc.firmware, tc.detail)
			assert.Equal(t, []Event{{At: c.t, Message: tc.want}}, r.Events(m1))
			assert.LessOrEqual(t, len(r.Events(m1)[0].Message), maxMessage+len("…"))
		})
	}
}

// TestMarksDoNotAllocate: once a machine is known and its events' ring is full, the
// boot services' marks allocate nothing, repeats or not. Not parallel: AllocsPerRun
// counts every goroutine's allocations.
func TestMarksDoNotAllocate(t *testing.T) {
	for _, tc := range []struct {
		name string
		do   func(r *Recorder)
	}{
		{"script again", func(r *Recorder) { r.MarkScript(m1, mac1, addr1, "uefi", "agent") }},
		{"agent again", func(r *Recorder) { r.Mark(m1, PhaseAgentRegistered, "uefi", "") }},
		{"DHCP again", func(r *Recorder) { r.MarkDHCP(mac1, m1, "bios", "proxy") }},
		{"a Talos chain, a new boot each time", func(r *Recorder) {
			r.MarkScript(m1, mac1, addr1, "uefi", "talos")
			r.Mark(m1, PhaseHandoff, "uefi", "ipxe")
		}},
		{"an agent boot to the install", func(r *Recorder) {
			r.MarkDHCP(mac1, "", "uefi", "proxy")
			r.MarkScript(m1, mac1, addr1, "uefi", "agent")
			r.MarkFrom(addr1, PhaseAgentAssets, "")
			r.Mark(m1, PhaseAgentRegistered, "uefi", "")
			r.Mark(m1, PhaseHandoff, "", "kexec")
			r.Mark(m1, PhaseInstalled, "", "event-sink")
		}},
	} {
		r := New(prometheus.NewRegistry())
		c := newClock()
		r.now = c.now

		step := func() {
			c.advance(time.Second)
			tc.do(r)
		}

		for range MaxEvents {
			step()
		}

		require.NotNil(t, r.Timeline(m1), tc.name)
		assert.Zero(t, testing.AllocsPerRun(100, step), tc.name)
	}
}

// TestEventsRing: the ring holds MaxEvents, no more room than that, and a new boot's
// marks go on from where the ring is.
func TestEventsRing(t *testing.T) {
	t.Parallel()

	r := New(nil)
	c := newClock()
	r.now = c.now

	for i := range MaxEvents + 3 {
		c.advance(time.Second)
		r.MarkScript(m1, mac1, addr1, "bios", fmt.Sprint("talos ", i))
		r.Mark(m1, PhaseHandoff, "", "ipxe")
	}

	r.mu.Lock()
	assert.Equal(t, MaxEvents, cap(r.machines[m1].events), "no room beyond MaxEvents")
	r.mu.Unlock()

	events := r.Events(m1)
	require.Len(t, events, MaxEvents)
	assert.Equal(t, Event{At: c.t, Message: "handed to Talos (ipxe)"}, events[0], "a mark tells the firmware it was given")
	assert.Equal(t, Event{At: c.t, Message: fmt.Sprintf("boot script fetched (talos %d, bios)", MaxEvents+2)}, events[1])
	assert.Equal(t, fmt.Sprintf("boot script fetched (talos %d, bios)", MaxEvents/2+3), events[MaxEvents-1].Message)

	timeline := r.Timeline(m1)
	require.Len(t, timeline, 2, "the last boot alone")
	assert.Equal(t, Mark{Phase: PhaseScript, At: c.t, Detail: fmt.Sprint("talos ", MaxEvents+2), Firmware: "bios"}, timeline[0])
	assert.Equal(t, Mark{Phase: PhaseHandoff, At: c.t, Detail: "ipxe", Firmware: ""}, timeline[1])

	// A timeline is the caller's: changing it changes nothing kept.
	timeline[0].Detail = "changed"
	assert.Equal(t, fmt.Sprint("talos ", MaxEvents+2), r.Timeline(m1)[0].Detail)
}

func TestChanged(t *testing.T) {
	t.Parallel()

	r := New(nil)
	c := newClock()
	r.now = c.now

	closed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}

	ch := r.Changed()
	assert.Equal(t, ch, r.Changed(), "one channel until a change")

	r.MarkDHCP(mac1, "", "uefi", "proxy")
	assert.False(t, closed(ch), "an offer held by MAC shows nowhere yet")

	r.MarkScript(m1, mac1, addr1, "uefi", "agent")
	assert.True(t, closed(ch))

	ch = r.Changed()
	r.MarkScript(m1, mac1, addr1, "uefi", "agent")
	assert.False(t, closed(ch), "a repeat is no change")

	r.Note(m1, "accepted")
	assert.True(t, closed(ch))
}

func TestForgetting(t *testing.T) {
	t.Parallel()

	r := New(nil)
	c := newClock()
	r.now = c.now

	r.MarkScript(m1, mac1, addr1, "uefi", "agent")
	r.MarkDHCP("52:54:00:00:00:02", "", "uefi", "proxy")
	c.advance(forgetAfter - time.Hour)
	r.Note(m2, "heard of")

	c.advance(2 * time.Hour)
	r.Note(m2, "heard of again") // sweeps

	assert.Nil(t, r.Events(m1), "forgotten a day after it was last heard of")
	assert.NotNil(t, r.Events(m2))

	r.mu.Lock()
	defer r.mu.Unlock()

	assert.Empty(t, r.dhcp, "held offers expire")
	assert.Empty(t, r.addrs, "script addresses expire")
}

func TestBounds(t *testing.T) {
	t.Parallel()

	r := New(nil)
	c := newClock()
	r.now = c.now

	for i := range maxMachines + 10 {
		id := fmt.Sprintf("4c4c4544-0000-1000-8000-%012d", i)
		mac := fmt.Sprintf("52:54:00:%02x:%02x:%02x", i>>16&0xff, i>>8&0xff, i&0xff)
		r.MarkDHCP(mac, id, "uefi", "proxy")
		r.MarkScript(id, mac+"x", fmt.Sprint("10.1.", i>>8&0xff, ".", i&0xff, "x"), "uefi", "agent")
	}

	r.mu.Lock()
	assert.Len(t, r.machines, maxMachines)
	assert.Len(t, r.dhcp, maxHeld)
	assert.LessOrEqual(t, len(r.addrs), maxHeld)
	r.mu.Unlock()

	// Once the old are stale, the new fit again.
	const newcomer = "4c4c4544-0000-1000-8000-0000000000ff"

	r.MarkScript(newcomer, mac1, addr1, "uefi", "agent")
	assert.Nil(t, r.Timeline(newcomer), "no room")

	c.advance(forgetAfter + time.Minute)
	r.MarkScript(newcomer, mac1, addr1, "uefi", "agent")
	assert.Len(t, r.Timeline(newcomer), 1)
}

func TestNilRecorder(t *testing.T) {
	t.Parallel()

	var r *Recorder

	r.Mark(m1, PhaseDHCP, "uefi", "")
	r.MarkDHCP(mac1, m1, "uefi", "proxy")
	r.MarkScript(m1, mac1, addr1, "uefi", "agent")
	r.MarkFrom(addr1, PhaseAgentAssets, "")
	r.Note(m1, "x")
	assert.Nil(t, r.Timeline(m1))
	assert.Nil(t, r.Events(m1))
	assert.Nil(t, r.Changed())
}

func TestConcurrentUse(t *testing.T) {
	t.Parallel()

	r := New(prometheus.NewRegistry())
	stop, done := make(chan struct{}), make(chan struct{})

	go func() {
		defer close(done)

		for {
			select {
			case <-r.Changed():
			case <-stop:
				return
			}
		}
	}()

	for i := range 1000 {
		r.MarkDHCP(mac1, m1, "uefi", "proxy")
		r.MarkScript(m1, mac1, addr1, "uefi", "agent")
		r.MarkFrom(addr1, PhaseAgentAssets, "")
		r.Mark(m1, PhaseAgentRegistered, "", "")
		r.Mark(m1, PhaseInstalled, "", fmt.Sprint(i))
		_ = r.Timeline(m1)
		_ = r.Events(m1)
	}

	close(stop)
	<-done
}

func TestPhasesAreConsistent(t *testing.T) {
	t.Parallel()

	require.Len(t, phaseNames, len(Phases), "every phase has its words")

	for i, p := range Phases {
		assert.Equal(t, i, phaseIndex(p), p)
	}
}

// BenchmarkMark is the marks of the boot services' hot paths, as a fleet repeats them:
// their time and allocations.
func BenchmarkMark(b *testing.B) {
	const fleet = 10000

	ids := make([]string, fleet)
	macs := make([]string, fleet)
	addrs := make([]string, fleet)

	for i := range fleet {
		ids[i] = fmt.Sprintf("4c4c4544-0000-1000-8000-%012d", i)
		macs[i] = fmt.Sprintf("52:54:00:%02x:%02x:%02x", i>>16&0xff, i>>8&0xff, i&0xff)
		addrs[i] = fmt.Sprint("10.1.", i>>8&0xff, ".", i&0xff)
	}

	for _, tc := range []struct {
		name string
		do   func(r *Recorder, i int)
	}{
		// iPXE fetching the agent's script again: a repeat of the boot's last phase.
		{"script-repeat", func(r *Recorder, _ int) { r.MarkScript(m1, mac1, addr1, "uefi", "agent") }},
		// The agent's session reconnecting.
		{"registered-repeat", func(r *Recorder, _ int) { r.Mark(m1, PhaseAgentRegistered, "uefi", "") }},
		// A machine chained to Talos by iPXE in a loop: every answer a new boot and its handoff.
		{"talos-boot", func(r *Recorder, _ int) {
			r.MarkScript(m1, mac1, addr1, "uefi", "talos")
			r.Mark(m1, PhaseHandoff, "uefi", "ipxe")
		}},
		// An agent boot from DHCP to the install.
		{"agent-boot", func(r *Recorder, _ int) {
			r.MarkDHCP(mac1, m1, "uefi", "proxy")
			r.MarkScript(m1, mac1, addr1, "uefi", "agent")
			r.MarkFrom(addr1, PhaseAgentAssets, "")
			r.Mark(m1, PhaseAgentRegistered, "uefi", "")
			r.Mark(m1, PhaseHandoff, "", "kexec")
			r.Mark(m1, PhaseInstalled, "", "event-sink")
		}},
		// A fleet of machines chained to Talos, each in turn.
		{"talos-fleet", func(r *Recorder, i int) {
			i %= fleet
			r.MarkScript(ids[i], macs[i], addrs[i], "uefi", "talos")
			r.Mark(ids[i], PhaseHandoff, "uefi", "ipxe")
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			r := New(prometheus.NewRegistry())

			// Warm: every machine known and its events' ring full, as in a running provider.
			for i := range fleet * MaxEvents / 2 {
				tc.do(r, i)
			}

			b.ReportAllocs()

			i := 0
			for b.Loop() {
				tc.do(r, i)
				i++
			}
		})
	}
}

// BenchmarkEvents is the console reading a machine's full ring of events, mostly marks.
func BenchmarkEvents(b *testing.B) {
	r := New(nil)

	for i := range MaxEvents {
		r.MarkScript(m1, mac1, addr1, "uefi", "talos")
		r.Mark(m1, PhaseHandoff, "uefi", "ipxe")

		if i%5 == 0 {
			r.Note(m1, "a note")
		}
	}

	b.ReportAllocs()

	for b.Loop() {
		if len(r.Events(m1)) != MaxEvents {
			b.Fatal("not a full ring")
		}
	}
}
