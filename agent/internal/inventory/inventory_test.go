package inventory_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jsimonetti/rtnetlink/v2"
	"github.com/siderolabs/go-smbios/smbios"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/anvil-metal/anvil/agent/internal/inventory"
	"github.com/anvil-metal/anvil/agent/internal/members/memberstest"
)

// emptyNetlink is a machine without network links.
type emptyNetlink struct{}

func (emptyNetlink) Links() ([]rtnetlink.LinkMessage, error)        { return nil, nil }
func (emptyNetlink) Addresses() ([]rtnetlink.AddressMessage, error) { return nil, nil }
func (emptyNetlink) Routes() ([]rtnetlink.RouteMessage, error)      { return nil, nil }
func (emptyNetlink) Close() error                                   { return nil }

// testSources reads nothing real: tests override what they exercise.
func testSources(t *testing.T) inventory.Sources {
	t.Helper()

	return inventory.Sources{
		SysfsRoot: t.TempDir(),
		ProcRoot:  "testdata/proc",
		SMBIOS: func() ([]byte, smbios.Version, error) {
			return nil, smbios.Version{}, errors.New("no SMBIOS in this test")
		},
		Netlink:  func() (inventory.Netlink, error) { return emptyNetlink{}, nil },
		Hostname: func() (string, error) { return "anvil-test", nil },
		Interval: 50 * time.Millisecond,
	}
}

// runInventory runs the real controller runtime on a fresh in-memory state
// until the test ends.
func runInventory(t *testing.T, src inventory.Sources) func() *inventory.Inventory {
	t.Helper()

	snapshot, _ := runCollector(t, src)

	return snapshot
}

// runCollector is runInventory that also returns the collector.
func runCollector(t *testing.T, src inventory.Sources) (func() *inventory.Inventory, *inventory.Collector) {
	t.Helper()

	ctx, cancel := context.WithCancel(t.Context())

	st, err := inventory.NewState(ctx)
	require.NoError(t, err)

	c := inventory.NewCollector(st, src, zaptest.NewLogger(t))

	var wg sync.WaitGroup

	wg.Go(func() {
		assert.NoError(t, c.Run(ctx))
	})

	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})

	return func() *inventory.Inventory {
		inv, err := inventory.Snapshot(ctx, st)
		require.NoError(t, err)

		return inv
	}, c
}

// eventually waits for cond over fresh snapshots.
func eventually(t *testing.T, snapshot func() *inventory.Inventory, cond func(*inventory.Inventory) bool) *inventory.Inventory {
	t.Helper()

	var inv *inventory.Inventory

	require.Eventually(t, func() bool {
		inv = snapshot()

		return cond(inv)
	}, 10*time.Second, 20*time.Millisecond)

	return inv
}

func goSMBIOSTestdata(t *testing.T) string {
	t.Helper()

	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/siderolabs/go-smbios").Output()
	require.NoError(t, err)

	return filepath.Join(strings.TrimSpace(string(out)), "smbios", "testdata")
}

func TestSMBIOSDumps(t *testing.T) {
	t.Parallel()

	dumps, err := filepath.Glob(filepath.Join(goSMBIOSTestdata(t), "*.dmi"))
	require.NoError(t, err)
	require.NotEmpty(t, dumps)

	for _, dump := range dumps {
		name := strings.TrimSuffix(filepath.Base(dump), ".dmi")

		t.Run(name, func(t *testing.T) {
			t.Parallel()

			raw, err := os.ReadFile(strings.TrimSuffix(dump, ".dmi") + ".json")
			require.NoError(t, err)

			var want smbios.SMBIOS

			require.NoError(t, json.Unmarshal(raw, &want))

			src := testSources(t)
			src.SMBIOS = inventory.SMBIOSFile(dump)

			wantModules := len(want.MemoryDevices)
			if wantModules == 0 {
				wantModules = 1 // the meminfo fallback
			}

			inv := eventually(t, runInventory(t, src), func(inv *inventory.Inventory) bool {
				return inv.System != nil && len(inv.Processors) == len(want.ProcessorInformation) && len(inv.MemoryModules) == wantModules
			})

			sys := inv.System.TypedSpec()
			assert.Equal(t, want.SystemInformation.Manufacturer, sys.Manufacturer)
			assert.Equal(t, want.SystemInformation.ProductName, sys.ProductName)
			assert.Equal(t, want.SystemInformation.SerialNumber, sys.SerialNumber)
			assert.Equal(t, want.SystemInformation.UUID, sys.UUID)

			var wantCPUs, wantCores, wantThreads int

			for _, p := range want.ProcessorInformation {
				if p.Status.SocketPopulated() {
					wantCPUs++
					wantCores += int(p.CoreCount)
					wantThreads += int(p.ThreadCount)
				}
			}

			for _, p := range inv.Processors {
				if p.TypedSpec().Socket != "" {
					assert.Contains(t, manufacturers(want.ProcessorInformation), p.TypedSpec().Manufacturer)
				}
			}

			var wantMiB uint64

			for _, m := range want.MemoryDevices {
				switch m.Size {
				case 0, 0xFFFF:
				case 0x7FFF:
					wantMiB += uint64(m.ExtendedSize)
				default:
					wantMiB += uint64(m.Size.Megabytes())
				}
			}

			if len(want.MemoryDevices) == 0 {
				wantMiB = 2030000 / 1024 // testdata/proc/meminfo
			}

			sum := inv.Summarize()
			assert.Equal(t, wantCPUs, sum.CPUs)
			assert.Equal(t, wantCores, sum.Cores)
			assert.Equal(t, wantThreads, sum.Threads)
			assert.Equal(t, wantMiB<<20, sum.MemoryBytes)
			assert.Equal(t, want.SystemInformation.UUID, sum.UUID)
		})
	}
}

func manufacturers(ps []smbios.ProcessorInformation) []string {
	var out []string

	for _, p := range ps {
		out = append(out, p.ProcessorManufacturer)
	}

	return out
}

func TestSMBIOSCorrupt(t *testing.T) {
	t.Parallel()

	full, err := os.ReadFile(filepath.Join(goSMBIOSTestdata(t), "Dell-PowerEdge-R630-Dual-Xeon.dmi"))
	require.NoError(t, err)

	for _, tc := range []struct {
		name       string
		table      []byte
		wantSystem bool
	}{
		{"truncated", full[:len(full)/2], true},
		{"cut mid-header", full[:3], false},
		{"empty", nil, false},
		{"garbage", []byte(strings.Repeat("\xff\x02", 300)), false},
		{"zero length structure", []byte{1, 0, 0, 0, 0, 0}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			src := testSources(t)
			src.SMBIOS = func() ([]byte, smbios.Version, error) { return tc.table, smbios.Version{Major: 3, Minor: 3}, nil }

			// The memory controller always reports something (SMBIOS or
			// meminfo), so it shows the runtime survived the table.
			inv := eventually(t, runInventory(t, src), func(inv *inventory.Inventory) bool {
				return len(inv.MemoryModules) > 0 && inv.Hostname != nil && (!tc.wantSystem || inv.System != nil)
			})

			if tc.wantSystem {
				assert.Equal(t, "Dell Inc.", inv.System.TypedSpec().Manufacturer)
			}
		})
	}
}

func TestSysfsFixture(t *testing.T) {
	t.Parallel()

	src := testSources(t)
	src.SysfsRoot = "testdata/q35"

	inv := eventually(t, runInventory(t, src), func(inv *inventory.Inventory) bool {
		return len(inv.PCIDevices) == 6 && len(inv.Disks) == 3
	})

	pci := map[string][4]string{}
	for _, d := range inv.PCIDevices {
		s := d.TypedSpec()
		pci[d.Metadata().ID()] = [4]string{s.VendorID + ":" + s.ProductID, s.Vendor, s.Product, s.Driver}
	}

	assert.Equal(t, map[string][4]string{
		"0000:00:00.0": {"0x8086:0x29c0", "Intel Corporation", "82G33/G31/P35/P31 Express DRAM Controller", ""},
		"0000:00:01.0": {"0x1af4:0x1000", "Red Hat, Inc.", "Virtio network device", "virtio-pci"},
		"0000:00:02.0": {"0x8086:0x10d3", "Intel Corporation", "82574L Gigabit Network Connection", "e1000e"},
		"0000:00:03.0": {"0x1b36:0x0010", "Red Hat, Inc.", "QEMU NVM Express Controller", "nvme"},
		"0000:00:04.0": {"0x1af4:0x1001", "Red Hat, Inc.", "Virtio block device", "virtio-pci"},
		"0000:00:1f.2": {"0x8086:0x2922", "Intel Corporation", "82801IR/IO/IH (ICH9R/DO/DH) 6 port SATA Controller [AHCI mode]", "ahci"},
	}, pci)

	for _, d := range inv.PCIDevices {
		if d.Metadata().ID() == "0000:00:03.0" {
			s := d.TypedSpec()
			assert.Equal(t, []string{"0x01", "0x08", "Mass storage controller", "Non-Volatile memory controller"},
				[]string{s.ClassID, s.SubclassID, s.Class, s.Subclass})
		}
	}

	type disk struct {
		Size              uint64
		SectorSize        uint
		Model, Serial     string
		Transport, WWID   string
		Firmware, BusPath string
		Readonly, CDROM   bool
		Rotational        bool
	}

	disks := map[string]disk{}
	for _, d := range inv.Disks {
		s := d.TypedSpec()
		disks[d.Metadata().ID()] = disk{
			s.Size, s.SectorSize, s.Model, s.Serial, s.Transport, s.WWID, s.FirmwareVersion, s.BusPath,
			s.Readonly, s.CDROM, s.Rotational,
		}

		assert.Equal(t, "/dev/"+d.Metadata().ID(), s.DevPath)
	}

	assert.Equal(t, map[string]disk{
		"vda": {Size: 10 << 30, SectorSize: 512, Serial: "anvil-vda", Transport: "virtio", BusPath: "/pci0000:00/0000:00:04.0/virtio1", Rotational: true},
		"nvme0n1": {
			Size: 20 << 30, SectorSize: 4096, Model: "QEMU NVMe Ctrl", Serial: "deadbeef", Transport: "nvme",
			WWID: "nvme.1b36-6465616462656566-51454d55204e564d65204374726c-00000001", Firmware: "9.1.0",
			BusPath: "/pci0000:00/0000:00:03.0/nvme",
		},
		"sr0": {
			Size: 1 << 30, SectorSize: 2048, Model: "QEMU DVD-ROM", Transport: "sata",
			BusPath: "/pci0000:00/0000:00:1f.2/ata1/host0/target0:0:0/0:0:0:0", Readonly: true, CDROM: true, Rotational: true,
		},
	}, disks)

	for _, d := range inv.Disks {
		if d.Metadata().ID() == "vda" {
			assert.Equal(t, "/sys/class/block", d.TypedSpec().SubSystem)
		}
	}

	assert.Len(t, inv.Summarize().Disks, 3)
}

func TestDisksVanish(t *testing.T) {
	t.Parallel()

	var (
		mu    sync.Mutex
		disks = []inventory.Disk{{ID: "sda"}, {ID: "sdb"}}
	)

	src := testSources(t)
	src.Disks = func(context.Context, *zap.Logger) ([]inventory.Disk, error) {
		mu.Lock()
		defer mu.Unlock()

		return disks, nil
	}

	snapshot := runInventory(t, src)
	eventually(t, snapshot, func(inv *inventory.Inventory) bool { return len(inv.Disks) == 2 })

	mu.Lock()
	disks = disks[1:]
	mu.Unlock()

	inv := eventually(t, snapshot, func(inv *inventory.Inventory) bool { return len(inv.Disks) == 1 })
	assert.Equal(t, "sdb", inv.Disks[0].Metadata().ID())
}

func TestMissingSources(t *testing.T) {
	t.Parallel()

	// An empty sysfs and procfs: nothing to report, nothing fatal.
	src := testSources(t)
	src.ProcRoot = t.TempDir()
	src.Netlink = func() (inventory.Netlink, error) { return nil, errors.New("no netlink here") }

	inv := eventually(t, runInventory(t, src), func(inv *inventory.Inventory) bool { return inv.Hostname != nil })
	assert.Empty(t, inv.PCIDevices)
	assert.Empty(t, inv.Disks)
	assert.Empty(t, inv.Links)
	assert.Equal(t, "anvil-test", inv.Hostname.TypedSpec().Hostname)
	assert.Empty(t, inv.Hostname.TypedSpec().Domainname)
}

// TestVolumes: the md RAID and LVM members among the disks and their partitions are
// reported as Talos' DiscoveredVolumes, read from the disks' metadata.
func TestVolumes(t *testing.T) {
	t.Parallel()

	dev := t.TempDir()
	array := [16]byte{0xa1, 0xa2, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}

	memberstest.Write(t, filepath.Join(dev, "sda"), memberstest.MD(array, "lab:data"))
	memberstest.Write(t, filepath.Join(dev, "sdb"), memberstest.MD(array, "lab:data"))
	memberstest.Write(t, filepath.Join(dev, "nvme0n1"), memberstest.LVM("AbCdEfGhIjKlMnOpQrStUvWxYz012345"))
	memberstest.Write(t, filepath.Join(dev, "vda"), nil)

	src := testSources(t)
	src.DevRoot = dev
	src.Disks = func(context.Context, *zap.Logger) ([]inventory.Disk, error) {
		var disks []inventory.Disk
		for _, name := range []string{"sda", "sdb", "nvme0n1", "vda"} {
			spec := block.DiskSpec{DevPath: "/dev/" + name}
			spec.SetSize(memberstest.ImageSize)
			disks = append(disks, inventory.Disk{ID: name, Spec: spec})
		}

		return disks, nil
	}

	inv := eventually(t, runInventory(t, src), func(inv *inventory.Inventory) bool { return len(inv.Volumes) == 3 })

	got := map[string]block.DiscoveredVolumeSpec{}
	for _, v := range inv.Volumes {
		got[v.Metadata().ID()] = *v.TypedSpec()
	}

	assert.Equal(t, "linux_raid_member", got["sda"].Name)
	assert.Equal(t, "a1a20001-0203-0405-0607-08090a0b0c0d", got["sda"].UUID)
	assert.Equal(t, "lab:data", got["sda"].Label)
	assert.Equal(t, "sda", got["sda"].Parent)
	assert.Equal(t, got["sda"].UUID, got["sdb"].UUID, "members of one array")
	assert.Equal(t, "lvm2-pv", got["nvme0n1"].Name)
	assert.Equal(t, "AbCdEf-GhIj-KlMn-OpQr-StUv-WxYz-012345", got["nvme0n1"].Label)
	assert.NotContains(t, got, "vda", "a disk with neither")
}
