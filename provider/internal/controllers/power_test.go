package controllers

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/provider/internal/resources"
)

func TestNextAction(t *testing.T) {
	t.Parallel()

	now := time.Now()
	on, off, unknown := resources.PowerOn, resources.PowerOff, resources.PowerUnknown

	for _, tc := range []struct {
		name              string
		desired, observed resources.PowerState
		reboot            bool
		last              time.Time
		want              string
	}{
		{"hands off", "", on, true, time.Time{}, actionNone},
		{"on wanted, off", on, off, false, time.Time{}, actionOn},
		{"on wanted, on", on, on, false, time.Time{}, actionNone},
		{"off wanted, on", off, on, false, time.Time{}, actionOff},
		{"off wanted, off", off, off, false, time.Time{}, actionNone},
		{"unknown: wait for a read", on, unknown, false, time.Time{}, actionNone},
		{"reboot wins", on, on, true, time.Time{}, actionReboot},
		{"reboot of an off machine", on, off, true, time.Time{}, actionReboot},
		{"rate limited", on, off, true, now.Add(-30 * time.Second), actionNone},
		{"after the interval", on, off, false, now.Add(-2 * time.Minute), actionOn},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			assert.Equal(t, tc.want, nextAction(tc.desired, tc.observed, tc.reboot, tc.last, now, time.Minute))
		})
	}
}

func TestReadDue(t *testing.T) {
	t.Parallel()

	now := time.Now()
	soon, past := now.Add(time.Second), now.Add(-time.Second)
	on, off, unknown := resources.PowerOn, resources.PowerOff, resources.PowerUnknown

	for _, tc := range []struct {
		name   string
		status resources.PowerStatusSpec
		reboot bool
		poll   time.Time
		want   bool
	}{
		{"never read", resources.PowerStatusSpec{Desired: on, State: unknown}, false, soon, true},
		{"as wanted, poll not due", resources.PowerStatusSpec{Desired: on, State: on}, false, soon, false},
		{"as wanted, poll due now", resources.PowerStatusSpec{Desired: on, State: on}, false, now, true},
		{"as wanted, poll overdue", resources.PowerStatusSpec{Desired: on, State: on}, false, past, true},
		{"not as wanted", resources.PowerStatusSpec{Desired: off, State: on}, false, soon, true},
		{"a reboot wanted", resources.PowerStatusSpec{Desired: on, State: on}, true, soon, true},
	} {
		assert.Equal(t, tc.want, readDue(tc.status, tc.reboot, now, tc.poll), tc.name)
	}
}

func TestWorthWriting(t *testing.T) {
	t.Parallel()

	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	base := resources.PowerStatusSpec{
		Backend: "ipmi", Endpoint: "10.0.0.1", State: resources.PowerOn, ObservedAt: at, Desired: resources.PowerOn,
		LastAction: actionOn, LastActionAt: at.Add(-time.Hour), RebootID: "r1", Condition: conditionOK,
	}

	for _, tc := range []struct {
		name   string
		change func(stored, s *resources.PowerStatusSpec)
		want   bool
	}{
		{"the same", func(_, _ *resources.PowerStatusSpec) {}, false},
		{"read again a poll later", func(_, s *resources.PowerStatusSpec) { s.ObservedAt = at.Add(30 * time.Second) }, false},
		{"read again just short of the refresh", func(_, s *resources.PowerStatusSpec) { s.ObservedAt = at.Add(observedRefresh - time.Second) }, false},
		{"read again a refresh later", func(_, s *resources.PowerStatusSpec) { s.ObservedAt = at.Add(observedRefresh) }, true},
		{"the same moments in another zone", func(_, s *resources.PowerStatusSpec) {
			s.ObservedAt, s.LastActionAt = s.ObservedAt.Local(), s.LastActionAt.In(time.FixedZone("X", 3600))
		}, false},
		{"a monotonic reading", func(stored, s *resources.PowerStatusSpec) {
			now := time.Now()
			stored.LastActionAt, s.LastActionAt = now.Round(0), now
		}, false},
		{"state", func(_, s *resources.PowerStatusSpec) { s.State = resources.PowerOff }, true},
		{"desired", func(_, s *resources.PowerStatusSpec) { s.Desired = resources.PowerOff }, true},
		{"condition and error", func(_, s *resources.PowerStatusSpec) { s.Condition, s.Error = conditionUnreachable, "no answer" }, true},
		{"one more failure", func(_, s *resources.PowerStatusSpec) { s.Failures++ }, true},
		{"endpoint", func(_, s *resources.PowerStatusSpec) { s.Endpoint = "10.0.0.2" }, true},
		{"a new action", func(_, s *resources.PowerStatusSpec) { s.LastActionAt = at.Add(time.Second) }, true},
		{"a reboot served", func(_, s *resources.PowerStatusSpec) { s.RebootID = "r2" }, true},
		{"a handoff fallback served", func(_, s *resources.PowerStatusSpec) { s.HandoffRebootID = "handoff-a1" }, true},
	} {
		stored, s := base, base
		tc.change(&stored, &s)

		assert.Equal(t, tc.want, worthWriting(stored, s), tc.name)
	}
}

func TestNextPoll(t *testing.T) {
	t.Parallel()

	const interval = 30 * time.Second

	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

	for _, tc := range []struct {
		name  string
		after time.Time
	}{
		{"on a round time", at},
		{"between", at.Add(7*time.Second + 3*time.Millisecond)},
		{"a day later", at.Add(24*time.Hour + 11*time.Second)},
		{"before the epoch", time.Date(1960, 1, 1, 0, 0, 0, 0, time.UTC)},
	} {
		for _, id := range []string{"00000000-0000-0000-0000-000000000001", "00000000-0000-0000-0000-000000000002"} {
			next := nextPoll(id, tc.after, interval)

			assert.True(t, next.After(tc.after), "%s, %s: after the moment", tc.name, id)
			assert.LessOrEqual(t, next.Sub(tc.after), interval, "%s, %s: within one interval", tc.name, id)
			assert.Equal(t, next.Add(interval), nextPoll(id, next, interval), "%s, %s: slots an interval apart", tc.name, id)
			assert.Equal(t, next, nextPoll(id, next.Add(-interval/2), interval), "%s, %s: the same slot from anywhere before it", tc.name, id)
		}
	}

	// A thousand machines' slots after the same moment fill the interval evenly.
	const machines, buckets = 1000, 10

	counts := make([]int, buckets)

	for i := range machines {
		wait := nextPoll(fmt.Sprintf("machine-%04d", i), at, interval).Sub(at)
		counts[min(int((wait-1)*buckets/interval), buckets-1)]++
	}

	for b, n := range counts {
		assert.Positive(t, n, "bucket %d of the interval unused", b)
		assert.LessOrEqual(t, n, 2*machines/buckets, "bucket %d holds a crowd", b)
	}
}

func TestRetryAt(t *testing.T) {
	t.Parallel()

	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

	const id = "00000000-0000-0000-0000-000000000001"

	for _, tc := range []struct {
		name   string
		status resources.PowerStatusSpec
		// from is the later of ObservedAt and LastActionAt, base the wait before jitter:
		// the retry is within ±20% of base after from, and never past backoffMax.
		from time.Time
		base time.Duration
	}{
		{"one failure", resources.PowerStatusSpec{ObservedAt: at, Failures: 1}, at, 4 * time.Second},
		{"three in a row", resources.PowerStatusSpec{ObservedAt: at, Failures: 3}, at, 16 * time.Second},
		{"below the cap, jitter may cross it", resources.PowerStatusSpec{ObservedAt: at, Failures: 7}, at, 256 * time.Second},
		{"capped", resources.PowerStatusSpec{ObservedAt: at, Failures: 40}, at, 5 * time.Minute},
		{"from the last action", resources.PowerStatusSpec{ObservedAt: at, LastActionAt: at.Add(time.Minute), Failures: 1}, at.Add(time.Minute), 4 * time.Second},
	} {
		got := retryAt(id, tc.status)
		wait := got.Sub(tc.from)

		assert.GreaterOrEqual(t, wait, tc.base-tc.base/5, tc.name)
		assert.LessOrEqual(t, wait, min(tc.base+tc.base/5, backoffMax), tc.name)
		assert.Equal(t, got, retryAt(id, tc.status), "%s: the same machine and attempt wait the same", tc.name)

		other := retryAt("00000000-0000-0000-0000-000000000002", tc.status)
		assert.NotEqual(t, got, other, "%s: two machines with the same attempt retry at different times", tc.name)

		span := tc.base / 5
		assert.NotEqual(t, jitter(id, tc.status.Failures, span), jitter(id, tc.status.Failures+1, span), "%s: a new attempt, a new jitter", tc.name)
	}

	assert.True(t, retryAt(id, resources.PowerStatusSpec{ObservedAt: at}).IsZero(), "not failing")
}

// A thousand BMCs that failed together (a switch down) spread their retries over the
// jitter window instead of retrying in the same instant.
func TestRetryAtSpreads(t *testing.T) {
	t.Parallel()

	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

	for _, tc := range []struct {
		name     string
		failures uint32
		lo, hi   time.Duration
	}{
		{"three in a row", 3, 16 * time.Second * 4 / 5, 16 * time.Second * 6 / 5},
		// Capped: the positive half of the jitter is reflected below the cap.
		{"capped", 40, backoffMax * 4 / 5, backoffMax},
	} {
		const machines, buckets = 1000, 20

		seen := make(map[time.Time]bool, machines)
		counts := make([]int, buckets)

		for i := range machines {
			got := retryAt(fmt.Sprintf("machine-%04d", i), resources.PowerStatusSpec{ObservedAt: at, Failures: tc.failures})
			wait := got.Sub(at)

			require.GreaterOrEqual(t, wait, tc.lo, tc.name)
			require.LessOrEqual(t, wait, tc.hi, tc.name)

			seen[got] = true
			counts[min(int((wait-tc.lo)*buckets/(tc.hi-tc.lo)), buckets-1)]++
		}

		assert.Len(t, seen, machines, "%s: no two machines retry in the same instant", tc.name)

		// Uniform is 50 a bucket (capped too: both halves of the jitter land below the
		// cap); every part of the window is used and none holds a crowd.
		for b, n := range counts {
			assert.Positive(t, n, "%s: bucket %d of the window unused", tc.name, b)
			assert.LessOrEqual(t, n, 2*machines/buckets, "%s: bucket %d holds a crowd", tc.name, b)
		}
	}
}

func TestNextWake(t *testing.T) {
	t.Parallel()

	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ctrl := &PowerController{PollInterval: 30 * time.Second, MinActionInterval: time.Minute}
	on, off := resources.PowerOn, resources.PowerOff

	for _, tc := range []struct {
		name   string
		status resources.PowerStatusSpec
		reboot bool
		want   time.Time
	}{
		{"steady: the next poll", resources.PowerStatusSpec{Desired: on, State: on, ObservedAt: now}, false, now.Add(30 * time.Second)},
		{
			"an action held back ends before the poll",
			resources.PowerStatusSpec{Desired: off, State: on, ObservedAt: now, LastActionAt: now.Add(-50 * time.Second)}, false, now.Add(10 * time.Second),
		},
		{
			"a reboot held back",
			resources.PowerStatusSpec{Desired: on, State: on, ObservedAt: now, LastActionAt: now.Add(-55 * time.Second)}, true, now.Add(5 * time.Second),
		},
		{
			"held back past the poll: the poll",
			resources.PowerStatusSpec{Desired: off, State: on, ObservedAt: now, LastActionAt: now}, false, now.Add(30 * time.Second),
		},
	} {
		assert.Equal(t, tc.want, ctrl.nextWake(tc.status, tc.reboot, now, now.Add(30*time.Second)), tc.name)
	}
}

func TestPollSchedule(t *testing.T) {
	t.Parallel()

	const (
		id       = "00000000-0000-0000-0000-000000000001"
		interval = 30 * time.Second
	)

	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

	for _, tc := range []struct {
		name  string
		start time.Time // zero: never reset
		read  time.Time // zero: not read
		now   time.Time
		want  time.Time
	}{
		{"not started: the slot after now", time.Time{}, time.Time{}, start, nextPoll(id, start, interval)},
		{"first seen as it starts", start, time.Time{}, start, nextPoll(id, start, interval)},
		{"first seen late: the slot after the start, past", start, time.Time{}, start.Add(time.Hour), nextPoll(id, start, interval)},
		{"started later than now (the clock went back)", start.Add(time.Hour), time.Time{}, start, nextPoll(id, start, interval)},
		{"read: the slot after the read", start, start.Add(time.Minute), start.Add(time.Minute), nextPoll(id, start.Add(time.Minute), interval)},
	} {
		var p pollSchedule

		if !tc.start.IsZero() {
			p.reset(tc.start)
		}

		if !tc.read.IsZero() {
			assert.Equal(t, tc.want, p.read(id, tc.read, interval), tc.name)
		}

		assert.Equal(t, tc.want, p.due(id, tc.now, interval), tc.name)
		assert.Equal(t, tc.want, p.due(id, tc.now.Add(interval), interval), "%s: kept until read again", tc.name)
	}

	// Reset forgets what was read before, and forget a machine that is gone.
	var p pollSchedule

	p.reset(start)
	p.read(id, start.Add(time.Hour), interval)
	p.reset(start.Add(2 * time.Hour))
	assert.Equal(t, nextPoll(id, start.Add(2*time.Hour), interval), p.due(id, start.Add(2*time.Hour), interval), "reset")

	p.read(id, start.Add(3*time.Hour), interval)
	p.forget(id)
	assert.Equal(t, nextPoll(id, start.Add(2*time.Hour), interval), p.due(id, start.Add(4*time.Hour), interval), "forgotten")
}
