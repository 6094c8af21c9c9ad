package extensions_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/siderolabs/go-smbios/smbios"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/extensions"
)

// q35Sysfs is the agent's inventory fixture: a QEMU q35 machine's sysfs.
const q35Sysfs = "../agent/internal/inventory/testdata/q35"

// sysfsPCI reads PCI functions the way the agent's inventory does: vendor, device and
// class files, and the driver symlink. A function without those files is skipped.
func sysfsPCI(t *testing.T, root string) []extensions.PCIDevice {
	t.Helper()

	dirs, err := filepath.Glob(filepath.Join(root, "devices", "pci0000:00", "0000:*"))
	require.NoError(t, err)
	require.NotEmpty(t, dirs)

	var out []extensions.PCIDevice

	for _, dir := range dirs {
		vendor, errV := os.ReadFile(filepath.Join(dir, "vendor"))
		device, errD := os.ReadFile(filepath.Join(dir, "device"))
		class, errC := os.ReadFile(filepath.Join(dir, "class"))

		if errV != nil || errD != nil || errC != nil {
			continue
		}

		code := strings.TrimPrefix(strings.TrimSpace(string(class)), "0x") // "020000"
		require.Len(t, code, 6, dir)

		d := extensions.PCIDevice{
			VendorID:   strings.TrimSpace(string(vendor)),
			ProductID:  strings.TrimSpace(string(device)),
			ClassID:    code[0:2],
			SubclassID: code[2:4],
		}

		if target, err := os.Readlink(filepath.Join(dir, "driver")); err == nil {
			d.Driver = filepath.Base(target)
		}

		out = append(out, d)
	}

	return out
}

func TestSuggestQ35(t *testing.T) {
	t.Parallel()

	c, err := extensions.Load()
	require.NoError(t, err)

	pci := sysfsPCI(t, q35Sysfs)
	// Host bridge, virtio-net, e1000e, QEMU NVMe, virtio-blk, AHCI; the VGA has no IDs in the dump.
	require.Len(t, pci, 6)

	// QEMU's emulated devices need no extension; its SMBIOS says "QEMU" for the CPU, while
	// cpuinfo reports the host's vendor, which does.
	assert.Empty(t, c.Suggest(extensions.Hardware{PCI: pci, CPUs: []extensions.CPU{{Vendor: "QEMU"}}}, "v1.13.0"))
	assert.Equal(t, []string{"siderolabs/intel-ucode"},
		names(c.Suggest(extensions.Hardware{PCI: pci, CPUs: []extensions.CPU{{Vendor: "GenuineIntel"}}}, "v1.13.0")))

	deny, err := extensions.LoadDenyList()
	require.NoError(t, err)
	assert.Empty(t, deny.Match(extensions.Hardware{PCI: pci}))
}

// goSMBIOSTestdata is where go-smbios keeps its dumps of real machines.
func goSMBIOSTestdata(t *testing.T) string {
	t.Helper()

	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/siderolabs/go-smbios").Output()
	require.NoError(t, err)

	return filepath.Join(strings.TrimSpace(string(out)), "smbios", "testdata")
}

func smbiosCPUs(t *testing.T, dump string) []extensions.CPU {
	t.Helper()

	table, err := os.ReadFile(dump)
	require.NoError(t, err)

	info, err := smbios.Decode(bytes.NewReader(table), smbios.Version{Major: 3, Minor: 3})
	require.NoError(t, err)

	var cpus []extensions.CPU

	for _, p := range info.ProcessorInformation {
		if p.Status.SocketPopulated() {
			cpus = append(cpus, extensions.CPU{Vendor: p.ProcessorManufacturer})
		}
	}

	return cpus
}

func TestSuggestSMBIOSDumps(t *testing.T) {
	t.Parallel()

	c, err := extensions.Load()
	require.NoError(t, err)

	dir := goSMBIOSTestdata(t)

	for _, tc := range []struct {
		dump string
		want []string
	}{
		{"ASRock-Single-Ryzen", []string{"siderolabs/amd-ucode"}},             // "Advanced Micro Devices, Inc."
		{"Beelink-EQ12", []string{"siderolabs/intel-ucode"}},                  // "Intel(R) Corporation"
		{"Dell-PowerEdge-R630-Dual-Xeon", []string{"siderolabs/intel-ucode"}}, // "Intel", one empty socket
		{"HyperV", []string{}}, // no processor structures
		{"MINISFORUM-UM790PRO", []string{"siderolabs/amd-ucode"}},
		{"SuperMicro-Dual-Xeon", []string{"siderolabs/intel-ucode"}},
		{"SuperMicro-Quad-Opteron", []string{"siderolabs/amd-ucode"}}, // "AMD"
	} {
		t.Run(tc.dump, func(t *testing.T) {
			t.Parallel()

			cpus := smbiosCPUs(t, filepath.Join(dir, tc.dump+".dmi"))

			assert.Equal(t, tc.want, names(c.Suggest(extensions.Hardware{CPUs: cpus}, "v1.12.0")))
		})
	}
}
