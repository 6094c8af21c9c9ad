package inventory_test

import (
	"net"
	"net/netip"
	"testing"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/siderolabs/talos/pkg/machinery/resources/hardware"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/internal/resourcewire"
	"github.com/anvil-metal/anvil/provider/internal/inventory"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

func reported() []resource.Resource {
	sys := hardware.NewSystemInformation(hardware.SystemInformationID)
	sys.TypedSpec().Manufacturer = "Dell Inc."
	sys.TypedSpec().ProductName = "PowerEdge R630"
	sys.TypedSpec().SerialNumber = "ABC123"
	sys.TypedSpec().UUID = "4c4c4544-0000-1000-8000-000000000001"

	cpu1 := hardware.NewProcessorInfo("CPU-2")
	cpu1.TypedSpec().Socket = "CPU2"
	cpu1.TypedSpec().ProductName = "Xeon E5-2630"
	cpu1.TypedSpec().CoreCount = 10
	cpu1.TypedSpec().ThreadCount = 20

	cpu0 := hardware.NewProcessorInfo("CPU-1")
	cpu0.TypedSpec().Socket = "CPU1"
	cpu0.TypedSpec().CoreCount = 10

	dimm := hardware.NewMemoryModuleInfo("A1")
	dimm.TypedSpec().DeviceLocator = "A1"
	dimm.TypedSpec().Size = 16384

	empty := hardware.NewMemoryModuleInfo("A2")
	empty.TypedSpec().DeviceLocator = "A2"

	disk := block.NewDisk(block.NamespaceName, "nvme0n1")
	disk.TypedSpec().Size = 1 << 40
	disk.TypedSpec().Model = "Samsung SSD"
	disk.TypedSpec().Transport = "nvme"

	nic := network.NewLinkStatus(network.NamespaceName, "eth0")
	nic.TypedSpec().Type = nethelpers.LinkEther
	nic.TypedSpec().HardwareAddr = nethelpers.HardwareAddr(net.HardwareAddr{0x52, 0x54, 0, 0, 0, 1})
	nic.TypedSpec().OperationalState = nethelpers.OperStateUp
	nic.TypedSpec().Driver = "virtio_net"
	nic.TypedSpec().BusPath = "pci-0000:00:03.0"

	lo := network.NewLinkStatus(network.NamespaceName, "lo")
	lo.TypedSpec().Type = nethelpers.LinkLoopbck

	addr := network.NewAddressStatus(network.NamespaceName, "eth0/10.77.0.101/24")
	addr.TypedSpec().LinkName = "eth0"
	addr.TypedSpec().Address = netip.MustParsePrefix("10.77.0.101/24")
	addr.TypedSpec().Scope = nethelpers.ScopeGlobal

	return []resource.Resource{sys, cpu1, cpu0, dimm, empty, disk, nic, lo, addr}
}

func TestEncodeDecodeSummarize(t *testing.T) {
	t.Parallel()

	raw, err := resourcewire.Encode(reported())
	require.NoError(t, err)

	decoded, err := resourcewire.Decode(raw)
	require.NoError(t, err)
	require.Len(t, decoded, len(reported()))

	got := inventory.Summarize(decoded)

	assert.Equal(t, resources.SystemInventory{Manufacturer: "Dell Inc.", Product: "PowerEdge R630", Serial: "ABC123", UUID: "4c4c4544-0000-1000-8000-000000000001"}, got.System)
	require.Len(t, got.CPUs, 2)
	assert.Equal(t, "CPU1", got.CPUs[0].Socket, "sorted by socket")
	assert.Equal(t, uint32(20), got.CPUs[1].Threads)
	assert.Equal(t, uint64(16384), got.MemoryMiB)
	assert.Len(t, got.Memory, 1, "empty slots are left out")
	require.Len(t, got.Disks, 1)
	assert.Equal(t, "nvme0n1", got.Disks[0].Name)
	require.Len(t, got.NICs, 1, "only physical links")
	assert.Equal(t, "52:54:00:00:00:01", got.NICs[0].MAC)
	assert.True(t, got.NICs[0].LinkUp)
	assert.Equal(t, []string{"10.77.0.101/24"}, got.NICs[0].Addresses)
}

func TestDecodeRejectsGarbage(t *testing.T) {
	t.Parallel()

	_, err := resourcewire.Decode([][]byte{{0xff, 0x01, 0x02}})
	assert.ErrorContains(t, err, "error decoding resource 0")

	_, err = resourcewire.Decode(make([][]byte, resourcewire.MaxResources+1))
	assert.ErrorContains(t, err, "at most")
}

// TestArrays: the md and LVM members the agent reports (Talos' DiscoveredVolumes) are
// grouped into the arrays they belong to, through the wire; other volumes are not arrays.
func TestArrays(t *testing.T) {
	t.Parallel()

	volume := func(id, name, uuid, label string) resource.Resource {
		v := block.NewDiscoveredVolume(block.NamespaceName, id)
		v.TypedSpec().Name, v.TypedSpec().UUID, v.TypedSpec().Label = name, uuid, label

		return v
	}

	raw, err := resourcewire.Encode([]resource.Resource{
		volume("sdb1", "linux_raid_member", "a1a20001-0203-0405-0607-08090a0b0c0d", "host:data"),
		volume("nvme0n1", "lvm2-pv", "", "AbCdEf-GhIj-KlMn-OpQr-StUv-WxYz-012345"),
		volume("sda1", "linux_raid_member", "a1a20001-0203-0405-0607-08090a0b0c0d", "host:data"),
		volume("sdc", "xfs", "5e1f0000-0000-0000-0000-000000000001", "data"),
	})
	require.NoError(t, err)

	decoded, err := resourcewire.Decode(raw)
	require.NoError(t, err)

	assert.Equal(t, []resources.ArrayInventory{
		{Kind: "lvm", ID: "AbCdEf-GhIj-KlMn-OpQr-StUv-WxYz-012345", Members: []string{"nvme0n1"}},
		{Kind: "md", ID: "a1a20001-0203-0405-0607-08090a0b0c0d", Name: "host:data", Members: []string{"sda1", "sdb1"}},
	}, inventory.Summarize(decoded).Arrays)
}
