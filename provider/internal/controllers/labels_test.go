package controllers_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/internal/disksel"
	"github.com/anvil-metal/anvil/provider/internal/controllers"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

func TestDeriveLabels(t *testing.T) {
	t.Parallel()

	dell := resources.MachineInventorySpec{
		System: resources.SystemInventory{Manufacturer: "Dell Inc.", Product: "PowerEdge R650", Serial: "ABC1234"},
		CPUs: []resources.CPUInventory{
			{Socket: "CPU1", Manufacturer: "Intel(R) Corporation", Model: "Intel(R) Xeon(R) Gold 6338", Cores: 32},
			{Socket: "CPU2", Manufacturer: "Intel(R) Corporation", Model: "Intel(R) Xeon(R) Gold 6338", Cores: 32},
		},
		MemoryMiB: 96 * 1024,
		Disks: []resources.DiskInventory{
			{Name: "nvme0n1", Size: 960e9, Transport: "nvme"},
			{Name: "nvme1n1", Size: 960e9, Transport: "nvme"},
			{Name: "sr0", Size: 0, CDROM: true, Transport: "sata"},
		},
		NICs: []resources.NICInventory{
			{Name: "eno1", SpeedMbps: 1000, LinkUp: true},
			{Name: "ens1f0", SpeedMbps: 25000, LinkUp: true},
			{Name: "ens1f1", SpeedMbps: -1},
		},
	}

	for _, tc := range []struct {
		name    string
		machine *resources.MachineSpec
		inv     *resources.MachineInventorySpec
		want    map[string]string
	}{
		{
			name:    "boot only",
			machine: &resources.MachineSpec{Arch: "amd64"},
			want:    map[string]string{controllers.LabelArch: "amd64"},
		},
		{
			name:    "a server",
			machine: &resources.MachineSpec{Arch: "amd64"},
			inv:     &dell,
			want: map[string]string{
				controllers.LabelArch: "amd64", controllers.LabelVendor: "dell-inc", controllers.LabelModel: "poweredge-r650",
				controllers.LabelCPUVendor: "intel", controllers.LabelCPUCores: "64", controllers.LabelMemoryClass: "64gib",
				controllers.LabelDiskCount: "2", controllers.LabelDiskType: "nvme", controllers.LabelNICSpeed: "25g",
				controllers.LabelIdentity: "none",
				// Its Intel CPU calls for the microcode extension (the extensions catalog).
				controllers.LabelExtensionPrefix + "intel-ucode": "suggested",
			},
		},
		{
			name:    "a lab VM: placeholders, no speed, one virtio disk",
			machine: &resources.MachineSpec{Arch: "amd64"},
			inv: &resources.MachineInventorySpec{
				System:    resources.SystemInventory{Manufacturer: "QEMU", Product: "Standard PC (Q35 + ICH9, 2009)"},
				CPUs:      []resources.CPUInventory{{Manufacturer: "QEMU", Cores: 2}},
				MemoryMiB: 2048,
				Disks:     []resources.DiskInventory{{Name: "vda", Size: 8 << 30, Transport: "virtio", Rotational: true}},
				NICs:      []resources.NICInventory{{Name: "eth0"}},
			},
			want: map[string]string{
				controllers.LabelArch: "amd64", controllers.LabelVendor: "qemu", controllers.LabelModel: "standard-pc-q35-ich9-2009",
				controllers.LabelCPUVendor: "qemu", controllers.LabelCPUCores: "2", controllers.LabelMemoryClass: "2gib",
				controllers.LabelDiskCount: "1", controllers.LabelDiskType: "hdd", controllers.LabelIdentity: "none",
			},
		},
		{
			name: "mixed disks, 2.5G, AMD, OEM placeholders, no disks counted twice",
			inv: &resources.MachineInventorySpec{
				System:    resources.SystemInventory{Manufacturer: "To Be Filled By O.E.M.", Product: "Default string"},
				CPUs:      []resources.CPUInventory{{Manufacturer: "Advanced Micro Devices, Inc.", Cores: 16}},
				MemoryMiB: 1536 * 1024,
				Disks: []resources.DiskInventory{
					{Name: "sda", Size: 4e12, Rotational: true, Transport: "sata"},
					{Name: "sdb", Size: 480e9, Transport: "sata"},
					{Name: "dm-0", Size: 480e9, Transport: "dm"},
					{Name: "sdc", Size: 16e9, Transport: "usb", Readonly: true},
				},
				NICs: []resources.NICInventory{{Name: "enp1s0", SpeedMbps: 2500}},
			},
			want: map[string]string{
				controllers.LabelCPUVendor: "amd", controllers.LabelCPUCores: "16", controllers.LabelMemoryClass: "1tib",
				controllers.LabelDiskCount: "2", controllers.LabelDiskType: "mixed", controllers.LabelNICSpeed: "2.5g", controllers.LabelExtensionPrefix + "amd-ucode": "suggested",
				controllers.LabelIdentity: "none",
			},
		},
		{
			name: "nothing known but an empty inventory: no disks is a fact, the rest is not",
			inv:  &resources.MachineInventorySpec{NICs: []resources.NICInventory{{Name: "eth0", SpeedMbps: 100}}},
			want: map[string]string{controllers.LabelDiskCount: "0", controllers.LabelNICSpeed: "100m", controllers.LabelIdentity: "none"},
		},
		{
			// Its agent proved a TPM's EK: identity tpm, before its inventory is in too.
			name:    "a proven TPM",
			machine: &resources.MachineSpec{Arch: "arm64", EK: "sha256:" + "ab"},
			want:    map[string]string{controllers.LabelArch: "arm64", controllers.LabelIdentity: "tpm"},
		},
		{
			name:    "a proven TPM and its inventory",
			machine: &resources.MachineSpec{EK: "sha256:" + "ab"},
			inv:     &resources.MachineInventorySpec{NICs: []resources.NICInventory{{Name: "eth0", SpeedMbps: 100}}},
			want:    map[string]string{controllers.LabelDiskCount: "0", controllers.LabelNICSpeed: "100m", controllers.LabelIdentity: "tpm"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			got := controllers.DeriveLabels(tc.machine, tc.inv)
			assert.Equal(t, tc.want, got)

			for k, v := range got {
				assert.NoError(t, resources.ValidateLabelKey(k))
				assert.NoError(t, resources.ValidateLabelValue(v))
				assert.True(t, resources.IsReservedLabelKey(k), k)
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

// TestInstallDiskLabel: whether the provider's install disk selector resolves on a
// machine, for a selector (a machine class, a MetalMachine's) to ask for the machines it
// does.
func TestInstallDiskLabel(t *testing.T) {
	t.Parallel()

	inv := &resources.MachineInventorySpec{Disks: []resources.DiskInventory{
		{Name: "nvme0n1", Size: 960e9, Serial: "S1", Transport: "nvme"},
		{Name: "nvme1n1", Size: 3840e9, Serial: "S2", Transport: "nvme"},
		{Name: "vda", Size: 10e9, Transport: "virtio"},
		{Name: "vdb", Size: 10e9, Transport: "virtio"},
	}}

	for _, tc := range []struct{ selector, want string }{
		{"type=nvme,pick=smallest", "resolved"},
		{"type=nvme", "ambiguous"},
		{"transport=virtio,pick=largest", "ambiguous"}, // a tie
		{"name=vda", "ambiguous"},                      // no serial or WWID to name it by
		{"type=nvme,size>=8TB", "none"},
		{"", ""},
	} {
		sel, err := disksel.Parse(tc.selector)
		require.NoError(t, err)

		assert.Equal(t, tc.want, controllers.InstallDiskLabel(sel, inv), tc.selector)
	}

	sel, err := disksel.Parse("type=nvme")
	require.NoError(t, err)
	assert.Empty(t, controllers.InstallDiskLabel(sel, nil), "no inventory, no label")
}
