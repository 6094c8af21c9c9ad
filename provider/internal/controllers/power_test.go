package controllers

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	anvilstate "github.com/anvil-metal/anvil/provider/internal/state"
)

func TestDesiredPower(t *testing.T) {
	t.Parallel()

	alloc := &anvilstate.Allocation{ID: "a1"}
	on, off := anvilstate.PowerOn, anvilstate.PowerOff

	for _, tc := range []struct {
		name   string
		intent anvilstate.MachineIntentSpec
		wiped  string
		idle   anvilstate.PowerState
		want   anvilstate.PowerState
	}{
		{"pending: hands off", anvilstate.MachineIntentSpec{Acceptance: anvilstate.AcceptancePending, Power: on}, "", off, ""},
		{"rejected: hands off", anvilstate.MachineIntentSpec{Acceptance: anvilstate.AcceptanceRejected, Allocation: alloc}, "", off, ""},
		{"accepted, wipe owed", anvilstate.MachineIntentSpec{Acceptance: anvilstate.AcceptanceAccepted, WipeID: "w1"}, "", off, on},
		{"accepted, wiped, idle off", anvilstate.MachineIntentSpec{Acceptance: anvilstate.AcceptanceAccepted, WipeID: "w1"}, "w1", off, off},
		{"accepted, idle default unset", anvilstate.MachineIntentSpec{Acceptance: anvilstate.AcceptanceAccepted}, "", "", off},
		{"accepted, idle on", anvilstate.MachineIntentSpec{Acceptance: anvilstate.AcceptanceAccepted}, "", on, on},
		{"allocated", anvilstate.MachineIntentSpec{Acceptance: anvilstate.AcceptanceAccepted, Allocation: alloc, WipeID: "w1"}, "w1", off, on},
		{"user says off, allocated", anvilstate.MachineIntentSpec{Acceptance: anvilstate.AcceptanceAccepted, Allocation: alloc, Power: off}, "", off, off},
		{"user says on, idle", anvilstate.MachineIntentSpec{Acceptance: anvilstate.AcceptanceAccepted, Power: on}, "", off, on},
		{"user says default", anvilstate.MachineIntentSpec{Acceptance: anvilstate.AcceptanceAccepted, Power: anvilstate.PowerDefault}, "", off, off},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			assert.Equal(t, tc.want, DesiredPower(tc.intent, &anvilstate.MachineStatusSpec{WipedID: tc.wiped}, tc.idle))
		})
	}
}

func TestNextAction(t *testing.T) {
	t.Parallel()

	now := time.Now()
	on, off, unknown := anvilstate.PowerOn, anvilstate.PowerOff, anvilstate.PowerUnknown

	for _, tc := range []struct {
		name              string
		desired, observed anvilstate.PowerState
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
