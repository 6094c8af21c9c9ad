package redfish

import (
	"context"

	"github.com/anvil-metal/anvil/hack/internal/machine"
)

// LabMachine is a lab QEMU machine behind the service: power through QEMU's start, stop
// and QMP, and the network boot override through the machine's one-shot boot order.
type LabMachine struct{ M *machine.Machine }

// LabSystem is the system the service shows for a lab machine: its SMBIOS identity.
func LabSystem(id string, m *machine.Machine) System {
	mode := "UEFI"
	if m.Firmware == machine.BIOS {
		mode = "Legacy"
	}

	return System{
		ID:           id,
		Machine:      LabMachine{M: m},
		Manufacturer: m.Vendor.Manufacturer,
		Model:        m.Vendor.Product,
		SerialNumber: m.Serial,
		BootMode:     mode,
	}
}

func (l LabMachine) UUID() string { return l.M.UUID }
func (l LabMachine) Name() string { return l.M.Name }

func (l LabMachine) PowerState(context.Context) (bool, error) { return l.M.Running(), nil }
func (l LabMachine) PowerOn(ctx context.Context) error        { return l.M.Start(ctx) }
func (l LabMachine) ForceOff(ctx context.Context) error       { return l.M.Stop(ctx) }

// Reset resets QEMU, or restarts it when a network boot is pending (machine.Reset).
func (l LabMachine) Reset(ctx context.Context) error { return l.M.Reset(ctx) }

func (l LabMachine) SetNextBootNetwork(_ context.Context, on bool) error {
	return l.M.SetNextBootNetwork(on)
}

func (l LabMachine) NextBootNetwork(context.Context) (bool, error) {
	return l.M.NextBootNetwork(), nil
}
