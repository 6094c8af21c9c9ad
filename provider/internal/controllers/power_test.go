package controllers

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

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

	for _, tc := range []struct {
		name   string
		status resources.PowerStatusSpec
		want   time.Time
	}{
		{"not failing", resources.PowerStatusSpec{ObservedAt: at}, time.Time{}},
		{"one failure", resources.PowerStatusSpec{ObservedAt: at, Failures: 1}, at.Add(4 * time.Second)},
		{"three in a row", resources.PowerStatusSpec{ObservedAt: at, Failures: 3}, at.Add(16 * time.Second)},
		{"capped", resources.PowerStatusSpec{ObservedAt: at, Failures: 40}, at.Add(5 * time.Minute)},
		{"from the last action", resources.PowerStatusSpec{ObservedAt: at, LastActionAt: at.Add(time.Minute), Failures: 1}, at.Add(time.Minute + 4*time.Second)},
	} {
		assert.Equal(t, tc.want, retryAt(tc.status), tc.name)
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
