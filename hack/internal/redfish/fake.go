package redfish

import (
	"context"
	"errors"
	"sync"
)

// FakeMachine is an in-memory machine: it keeps its power and boot override and records
// every boot, so that a Redfish client can be tested without QEMU (sushy-tools has its
// fake driver for the same reason).
type FakeMachine struct {
	uuid, name string

	mu      sync.Mutex
	on      bool
	netOnce bool
	calls   []string
}

// Calls and boots FakeMachine records.
const (
	CallPowerOn  = "PowerOn"
	CallForceOff = "ForceOff"
	CallReset    = "Reset"
	BootNetwork  = "boot:network"
	BootDisk     = "boot:disk"
)

// NewFakeMachine makes a machine that is on or off.
func NewFakeMachine(uuid, name string, on bool) *FakeMachine {
	return &FakeMachine{uuid: uuid, name: name, on: on}
}

func (f *FakeMachine) UUID() string { return f.uuid }
func (f *FakeMachine) Name() string { return f.name }

// Calls lists the power calls and the boots, in order.
func (f *FakeMachine) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()

	return append([]string(nil), f.calls...)
}

func (f *FakeMachine) PowerState(context.Context) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()

	return f.on, nil
}

func (f *FakeMachine) PowerOn(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()

	f.calls = append(f.calls, CallPowerOn)
	f.on = true
	f.boot()

	return nil
}

func (f *FakeMachine) ForceOff(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()

	f.calls = append(f.calls, CallForceOff)
	f.on = false

	return nil
}

func (f *FakeMachine) Reset(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()

	if !f.on {
		return errors.New("the machine is off")
	}

	f.calls = append(f.calls, CallReset)
	f.boot()

	return nil
}

// boot records what the machine boots and consumes the override; f.mu is held.
func (f *FakeMachine) boot() {
	if f.netOnce {
		f.calls = append(f.calls, BootNetwork)
		f.netOnce = false

		return
	}

	f.calls = append(f.calls, BootDisk)
}

func (f *FakeMachine) SetNextBootNetwork(_ context.Context, on bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()

	f.netOnce = on

	return nil
}

func (f *FakeMachine) NextBootNetwork(context.Context) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()

	return f.netOnce, nil
}
