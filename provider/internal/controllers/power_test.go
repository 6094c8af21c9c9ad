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
	on, off, unknown := resources.PowerOn, resources.PowerOff, resources.PowerUnknown

	for _, tc := range []struct {
		name   string
		status resources.PowerStatusSpec
		reboot bool
		want   bool
	}{
		{"never read", resources.PowerStatusSpec{Desired: on, State: unknown}, false, true},
		{"read a moment ago, as wanted", resources.PowerStatusSpec{Desired: on, State: on, ObservedAt: now.Add(-time.Second)}, false, false},
		{"read a poll ago", resources.PowerStatusSpec{Desired: on, State: on, ObservedAt: now.Add(-time.Minute)}, false, true},
		{"not as wanted", resources.PowerStatusSpec{Desired: off, State: on, ObservedAt: now.Add(-time.Second)}, false, true},
		{"a reboot wanted", resources.PowerStatusSpec{Desired: on, State: on, ObservedAt: now.Add(-time.Second)}, true, true},
	} {
		assert.Equal(t, tc.want, readDue(tc.status, tc.reboot, now, 30*time.Second), tc.name)
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
		assert.Equal(t, tc.want, ctrl.nextWake(tc.status, tc.reboot, now), tc.name)
	}
}
