package inventory_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/anvil-metal/anvil/provider/internal/inventory"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

func TestKexecBlockers(t *testing.T) {
	t.Parallel()

	// An NVIDIA A100 bound to the nvidia driver: on the deny list (its GSP firmware runs on).
	gpu := resources.PCIInventory{VendorID: "0x10de", ProductID: "0x20b0", ClassID: "0x03", SubclassID: "0x02", Driver: "nvidia"}

	for _, tc := range []struct {
		name string
		spec *resources.MachineInventorySpec
		want []string
	}{
		{name: "no inventory"},
		{name: "a plain server", spec: &resources.MachineInventorySpec{CPUs: []resources.CPUInventory{{Manufacturer: "Intel(R) Corporation"}}}},
		{
			name: "an agent that cannot", spec: &resources.MachineInventorySpec{KexecUnavailable: "Talos keeps kexec to itself"},
			want: []string{"agent: Talos keeps kexec to itself"},
		},
	} {
		assert.Equal(t, tc.want, inventory.KexecBlockers(tc.spec), tc.name)
	}

	blockers := inventory.KexecBlockers(&resources.MachineInventorySpec{PCIDevices: []resources.PCIInventory{gpu}})
	if assert.Len(t, blockers, 1, "a GPU the next kernel cannot reset") {
		assert.Contains(t, blockers[0], "nvidia")
	}
}

func TestSuggestedExtensions(t *testing.T) {
	t.Parallel()

	spec := &resources.MachineInventorySpec{
		CPUs:       []resources.CPUInventory{{Manufacturer: "Advanced Micro Devices, Inc."}},
		PCIDevices: []resources.PCIInventory{{VendorID: "0x8086", ProductID: "0x1593", ClassID: "0x02", SubclassID: "0x00", Driver: "ice"}},
	}

	var names []string
	for _, s := range inventory.SuggestedExtensions(spec, "v1.12.0") {
		names = append(names, s.Extension)
	}

	assert.Equal(t, []string{"siderolabs/amd-ucode", "siderolabs/intel-ice-firmware"}, names)
	assert.Empty(t, inventory.SuggestedExtensions(nil, ""))
}
