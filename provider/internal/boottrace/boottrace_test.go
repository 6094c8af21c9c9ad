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
