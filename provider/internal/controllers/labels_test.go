package controllers_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/anvil-metal/anvil/provider/internal/controllers"
	"github.com/anvil-metal/anvil/provider/internal/state"
)

func TestDeriveLabels(t *testing.T) {
	t.Parallel()

	dell := state.MachineInventorySpec{
		System: state.SystemInventory{Manufacturer: "Dell Inc.", Product: "PowerEdge R650", Serial: "ABC1234"},
		CPUs: []state.CPUInventory{
			{Socket: "CPU1", Manufacturer: "Intel(R) Corporation", Model: "Intel(R) Xeon(R) Gold 6338", Cores: 32},
			{Socket: "CPU2", Manufacturer: "Intel(R) Corporation", Model: "Intel(R) Xeon(R) Gold 6338", Cores: 32},
		},
		MemoryMiB: 96 * 1024,
		Disks: []state.DiskInventory{
			{Name: "nvme0n1", Size: 960e9, Transport: "nvme"},
			{Name: "nvme1n1", Size: 960e9, Transport: "nvme"},
			{Name: "sr0", Size: 0, CDROM: true, Transport: "sata"},
		},
		NICs: []state.NICInventory{
			{Name: "eno1", SpeedMbps: 1000, LinkUp: true},
			{Name: "ens1f0", SpeedMbps: 25000, LinkUp: true},
			{Name: "ens1f1", SpeedMbps: -1},
		},
	}

	for _, tc := range []struct {
		name    string
		machine *state.MachineSpec
		inv     *state.MachineInventorySpec
		want    map[string]string
	}{
		{
			name:    "boot only",
			machine: &state.MachineSpec{Arch: "amd64"},
			want:    map[string]string{controllers.LabelArch: "amd64"},
		},
		{
			name:    "a server",
			machine: &state.MachineSpec{Arch: "amd64"},
			inv:     &dell,
			want: map[string]string{
				controllers.LabelArch: "amd64", controllers.LabelVendor: "dell-inc", controllers.LabelModel: "poweredge-r650",
				controllers.LabelCPUVendor: "intel", controllers.LabelCPUCores: "64", controllers.LabelMemoryClass: "64gib",
				controllers.LabelDiskCount: "2", controllers.LabelDiskType: "nvme", controllers.LabelNICSpeed: "25g",
			},
		},
		{
			name:    "a lab VM: placeholders, no speed, one virtio disk",
			machine: &state.MachineSpec{Arch: "amd64"},
			inv: &state.MachineInventorySpec{
				System:    state.SystemInventory{Manufacturer: "QEMU", Product: "Standard PC (Q35 + ICH9, 2009)"},
				CPUs:      []state.CPUInventory{{Manufacturer: "QEMU", Cores: 2}},
				MemoryMiB: 2048,
				Disks:     []state.DiskInventory{{Name: "vda", Size: 8 << 30, Transport: "virtio", Rotational: true}},
				NICs:      []state.NICInventory{{Name: "eth0"}},
			},
			want: map[string]string{
				controllers.LabelArch: "amd64", controllers.LabelVendor: "qemu", controllers.LabelModel: "standard-pc-q35-ich9-2009",
				controllers.LabelCPUVendor: "qemu", controllers.LabelCPUCores: "2", controllers.LabelMemoryClass: "2gib",
				controllers.LabelDiskCount: "1", controllers.LabelDiskType: "hdd",
			},
		},
		{
			name: "mixed disks, 2.5G, AMD, OEM placeholders, no disks counted twice",
			inv: &state.MachineInventorySpec{
				System:    state.SystemInventory{Manufacturer: "To Be Filled By O.E.M.", Product: "Default string"},
				CPUs:      []state.CPUInventory{{Manufacturer: "Advanced Micro Devices, Inc.", Cores: 16}},
				MemoryMiB: 1536 * 1024,
				Disks: []state.DiskInventory{
					{Name: "sda", Size: 4e12, Rotational: true, Transport: "sata"},
					{Name: "sdb", Size: 480e9, Transport: "sata"},
					{Name: "dm-0", Size: 480e9, Transport: "dm"},
					{Name: "sdc", Size: 16e9, Transport: "usb", Readonly: true},
				},
				NICs: []state.NICInventory{{Name: "enp1s0", SpeedMbps: 2500}},
			},
			want: map[string]string{
				controllers.LabelCPUVendor: "amd", controllers.LabelCPUCores: "16", controllers.LabelMemoryClass: "1tib",
				controllers.LabelDiskCount: "2", controllers.LabelDiskType: "mixed", controllers.LabelNICSpeed: "2.5g",
			},
		},
		{
			name: "nothing known but an empty inventory: no disks is a fact, the rest is not",
			inv:  &state.MachineInventorySpec{NICs: []state.NICInventory{{Name: "eth0", SpeedMbps: 100}}},
			want: map[string]string{controllers.LabelDiskCount: "0", controllers.LabelNICSpeed: "100m"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			got := controllers.DeriveLabels(tc.machine, tc.inv)
			assert.Equal(t, tc.want, got)

			for k, v := range got {
				assert.NoError(t, state.ValidateLabelKey(k))
				assert.NoError(t, state.ValidateLabelValue(v))
				assert.True(t, state.IsReservedLabelKey(k), k)
			}
		})
	}
}

func TestMemoryClass(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		mib  uint64
		want string
	}{
		{0, ""},
		{512, "lt1gib"},
		{1024, "1gib"},
		{2047, "1gib"},
		{8 * 1024, "8gib"},
		{64 * 1024, "64gib"},
		{127 * 1024, "64gib"},
		{128 * 1024, "128gib"},
		{768 * 1024, "512gib"},
		{1024 * 1024, "1tib"},
		{4096 * 1024, "4tib"},
	} {
		assert.Equal(t, tc.want, controllers.MemoryClass(tc.mib), "%d MiB", tc.mib)
	}
}
