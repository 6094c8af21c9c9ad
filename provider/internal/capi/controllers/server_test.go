package controllers_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	infrav1 "github.com/anvil-metal/anvil/api/infrastructure/v1beta1"
	"github.com/anvil-metal/anvil/provider/internal/capi/anvilclient"
	"github.com/anvil-metal/anvil/provider/internal/capi/controllers"
	"github.com/anvil-metal/anvil/provider/internal/lifecycle"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

func TestServerFor(t *testing.T) {
	t.Parallel()

	const id = "3f0c8c4e-1b7a-4e55-9d2b-6a1f0e2d9c11"

	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	alloc := &resources.Allocation{ID: "a1", TalosVersion: "v1.13.0", Owner: "capi/default/m/u", AllocatedAt: at}

	machine := func(intent resources.MachineIntentSpec, status resources.MachineStatusSpec) anvilclient.Machine {
		return anvilclient.Machine{
			Machine: lifecycle.Machine{
				ID:      id,
				Machine: &resources.MachineSpec{UUID: id, Arch: "amd64", LastAddress: "10.5.0.21"},
				Intent:  &intent,
				Status:  &status,
			},
			Labels: map[string]string{"anvil.dev/cpu-vendor": "intel", "rack": "r1"},
			Inventory: &resources.MachineInventorySpec{
				System:    resources.SystemInventory{Manufacturer: "Dell Inc.", Product: "PowerEdge R650", Serial: "ABC"},
				CPUs:      []resources.CPUInventory{{Cores: 16, Threads: 32, Model: "Xeon"}, {Cores: 16, Threads: 32, Model: "Xeon"}},
				MemoryMiB: 262144,
				Disks:     []resources.DiskInventory{{Name: "nvme0n1", Size: 1 << 40}, {Name: "sr0", CDROM: true}},
				NICs:      []resources.NICInventory{{Name: "eno1", MAC: "02:00:00:00:00:01"}},
				Hostname:  "r650-1",
			},
			Power: "on",
		}
	}

	for _, tc := range []struct {
		name   string
		m      anvilclient.Machine
		state  infrav1.ServerState
		owner  string
		inst   bool
		cordon bool
	}{
		{"available", machine(resources.MachineIntentSpec{Acceptance: resources.AcceptanceAccepted}, resources.MachineStatusSpec{}), infrav1.ServerAvailable, "", false, false},
		{"wipe owed", machine(resources.MachineIntentSpec{Acceptance: resources.AcceptanceAccepted, WipeID: "w1"}, resources.MachineStatusSpec{}), infrav1.ServerPreparing, "", false, false},
		{"cordoned", machine(resources.MachineIntentSpec{Acceptance: resources.AcceptanceAccepted, Cordoned: true}, resources.MachineStatusSpec{}), infrav1.ServerAvailable, "", false, true},
		{"allocated", machine(resources.MachineIntentSpec{Acceptance: resources.AcceptanceAccepted, Allocation: alloc}, resources.MachineStatusSpec{}), infrav1.ServerAllocated, alloc.Owner, false, false},
		{"installed", machine(resources.MachineIntentSpec{Acceptance: resources.AcceptanceAccepted, Allocation: alloc}, resources.MachineStatusSpec{InstalledAllocation: "a1"}), infrav1.ServerInstalled, alloc.Owner, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			s := controllers.ServerFor(tc.m)
			assert.Equal(t, id, s.Name)
			assert.Equal(t, tc.m.Labels, s.Labels)
			assert.Equal(t, tc.state, s.Status.State)
			assert.Equal(t, tc.cordon, s.Status.Cordoned)
			assert.Equal(t, "on", s.Status.Power)

			if tc.owner == "" {
				assert.Nil(t, s.Status.Allocation)
			} else {
				assert.Equal(t, tc.owner, s.Status.Allocation.Owner)
				assert.Equal(t, tc.inst, s.Status.Allocation.Installed)
				assert.True(t, s.Status.Allocation.AllocatedAt.Time.Equal(at))
			}

			hw := s.Status.Hardware
			assert.Equal(t, infrav1.ServerHardware{
				Manufacturer: "Dell Inc.", Product: "PowerEdge R650", SerialNumber: "ABC", Architecture: "amd64",
				Sockets: 2, Cores: 32, Threads: 64, CPUModel: "Xeon", MemoryMiB: 262144,
				Disks: []infrav1.ServerDisk{{Name: "nvme0n1", SizeBytes: 1 << 40}},
				NICs:  []infrav1.ServerNIC{{Name: "eno1", MAC: "02:00:00:00:00:01"}},
			}, hw)
			assert.Equal(t, []infrav1.MachineAddress{
				{Type: infrav1.MachineHostName, Address: "r650-1"},
				{Type: infrav1.MachineInternalIP, Address: "10.5.0.21"},
			}, s.Status.Addresses)
		})
	}
}
