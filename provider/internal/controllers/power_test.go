package controllers

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/anvil-metal/anvil/provider/internal/resources"
)

func TestDesiredPower(t *testing.T) {
	t.Parallel()

	alloc := &resources.Allocation{ID: "a1"}
	on, off := resources.PowerOn, resources.PowerOff

	for _, tc := range []struct {
		name   string
		intent resources.MachineIntentSpec
		wiped  string
		idle   resources.PowerState
		want   resources.PowerState
	}{
		{"pending: hands off", resources.MachineIntentSpec{Acceptance: resources.AcceptancePending, Power: on}, "", off, ""},
		{"rejected: hands off", resources.MachineIntentSpec{Acceptance: resources.AcceptanceRejected, Allocation: alloc}, "", off, ""},
		{"accepted, wipe owed", resources.MachineIntentSpec{Acceptance: resources.AcceptanceAccepted, WipeID: "w1"}, "", off, on},
		{"accepted, wiped, idle off", resources.MachineIntentSpec{Acceptance: resources.AcceptanceAccepted, WipeID: "w1"}, "w1", off, off},
		{"accepted, idle default unset", resources.MachineIntentSpec{Acceptance: resources.AcceptanceAccepted}, "", "", off},
		{"accepted, idle on", resources.MachineIntentSpec{Acceptance: resources.AcceptanceAccepted}, "", on, on},
		{"allocated", resources.MachineIntentSpec{Acceptance: resources.AcceptanceAccepted, Allocation: alloc, WipeID: "w1"}, "w1", off, on},
		{"user says off, allocated", resources.MachineIntentSpec{Acceptance: resources.AcceptanceAccepted, Allocation: alloc, Power: off}, "", off, off},
		{"user says on, idle", resources.MachineIntentSpec{Acceptance: resources.AcceptanceAccepted, Power: on}, "", off, on},
		{"user says default", resources.MachineIntentSpec{Acceptance: resources.AcceptanceAccepted, Power: resources.PowerDefault}, "", off, off},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			assert.Equal(t, tc.want, DesiredPower(tc.intent, &resources.MachineStatusSpec{WipedID: tc.wiped}, tc.idle))
		})
	}
}

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
