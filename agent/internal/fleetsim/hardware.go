package fleetsim

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/siderolabs/go-smbios/smbios"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/siderolabs/talos/pkg/machinery/resources/hardware"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"

	"github.com/anvil-metal/anvil/agent/internal/inventory"
	"github.com/anvil-metal/anvil/internal/resourcewire"
)

// profile is a hardware model: what an SMBIOS dump says of its system, processors and
// memory; each machine of the model gets its own UUID and serial.
type profile struct {
	Name   string
	SMBIOS *inventory.Inventory
}

// nicModel is a NIC a simulated machine may carry, with the PCI identity and driver the
// extensions catalog reads.
type nicModel struct {
	Driver, Vendor, Product, VendorID, ProductID string
	SpeedMbps                                    int
}

var nicModels = []nicModel{
	{"i40e", "Intel Corporation", "Ethernet Controller X710 for 10GbE SFP+", "8086", "1572", 10000},
	{"bnx2x", "Broadcom Inc. and subsidiaries", "NetXtreme II BCM57810 10 Gigabit Ethernet", "14e4", "168e", 10000},
	{"mlx5_core", "Mellanox Technologies", "MT27800 Family [ConnectX-5]", "15b3", "1017", 25000},
	{"igb", "Intel Corporation", "I350 Gigabit Network Connection", "8086", "1521", 1000},
}

// LoadProfiles reads every SMBIOS dump (*.dmi) in dir: go-smbios' testdata when dir is
// empty (found in the module cache).
func LoadProfiles(dir string) ([]profile, error) {
	if dir == "" {
		var err error
		if dir, err = smbiosTestdata(); err != nil {
			return nil, err
		}
	}

	dumps, err := filepath.Glob(filepath.Join(dir, "*.dmi"))
	if err != nil || len(dumps) == 0 {
		return nil, fmt.Errorf("no SMBIOS dumps (*.dmi) in %s", dir)
	}

	var profiles []profile

	for _, dump := range dumps {
		table, err := os.ReadFile(dump)
		if err != nil {
			return nil, fmt.Errorf("error reading %s: %w", dump, err)
		}

		inv, err := inventory.FromSMBIOS(table, smbios.Version{Major: 3, Minor: 3})
		if err != nil {
			continue // a dump without what a server reports is no profile
		}

		profiles = append(profiles, profile{Name: strings.TrimSuffix(filepath.Base(dump), ".dmi"), SMBIOS: inv})
	}

	if len(profiles) == 0 {
		return nil, fmt.Errorf("no usable SMBIOS dump in %s", dir)
	}

	return profiles, nil
}

// smbiosTestdata finds go-smbios' testdata in the module cache: the module's version in
// this build, else the one the go command resolves.
func smbiosTestdata() (string, error) {
	const module = "github.com/siderolabs/go-smbios"

	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path != module {
				continue
			}

			out, err := exec.Command("go", "env", "GOMODCACHE").Output()
			if err != nil {
				return "", fmt.Errorf("error finding the module cache (give -smbios-dir): %w", err)
			}

			return filepath.Join(strings.TrimSpace(string(out)), module+"@"+dep.Version, "smbios", "testdata"), nil
		}
	}

	// A test binary lists no modules: ask the go command, from inside the module.
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", module).Output()
	if err != nil {
		return "", errors.New("go-smbios' fixtures not found: give -smbios-dir")
	}

	return filepath.Join(strings.TrimSpace(string(out)), "smbios", "testdata"), nil
}

// encodeInventory builds machine id's inventory as the agent reports it and encodes it.
func encodeInventory(id identity, p profile) ([][]byte, error) {
	var out []resource.Resource

	system := p.SMBIOS.System.DeepCopy().(*hardware.SystemInformation) //nolint:forcetypeassert // a copy has its original's type
	system.TypedSpec().UUID = id.UUID
	system.TypedSpec().SerialNumber = id.Serial
	out = append(out, system)

	for _, r := range p.SMBIOS.Processors {
		out = append(out, r)
	}

	for _, r := range p.SMBIOS.MemoryModules {
		out = append(out, r)
	}

	for i, d := range id.Disks {
		disk := block.NewDisk(block.NamespaceName, d.Name)
		*disk.TypedSpec() = block.DiskSpec{
			DevPath: "/dev/" + d.Name, Size: d.Size, IOSize: 4096, SectorSize: 512, Model: d.Model, Serial: d.Serial,
			Transport: d.Transport, Rotational: d.Rotational,
			BusPath: fmt.Sprintf("/pci0000:00/0000:00:%02x.0/%s", 0x10+i, d.Name), SubSystem: "/sys/class/block",
		}
		out = append(out, disk)

		if d.Transport == "nvme" {
			out = append(out, pciDevice(fmt.Sprintf("0000:%02x:00.0", 0x10+i), "01", "08", "144d", "a80a",
				"Samsung Electronics Co Ltd", "NVMe SSD Controller PM9A1/PM9A3/980PRO", "nvme"))
		}
	}

	model := nicModels[id.rand%uint64(len(nicModels))]

	for n, mac := range id.MACs {
		name := fmt.Sprintf("enp%ds0f%d", 0x40+n/2, n%2)
		pciID := fmt.Sprintf("0000:%02x:00.%d", 0x40+n/2, n%2)

		link := network.NewLinkStatus(network.NamespaceName, name)
		*link.TypedSpec() = network.LinkStatusSpec{
			Index: uint32(2 + n), Type: nethelpers.LinkEther, Flags: nethelpers.LinkFlags(0x1003),
			HardwareAddr: nethelpers.HardwareAddr(mac), PermanentAddr: nethelpers.HardwareAddr(mac),
			BroadcastAddr: nethelpers.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, MTU: 1500, QueueDisc: "mq",
			OperationalState: nethelpers.OperStateUp, BusPath: pciID, PCIID: strings.ToUpper(model.VendorID + ":" + model.ProductID),
			Driver: model.Driver, Vendor: model.Vendor, Product: model.Product, VendorID: "0x" + model.VendorID, ProductID: "0x" + model.ProductID,
			LinkState: n == 0, SpeedMegabits: model.SpeedMbps, Port: nethelpers.Fibre, Duplex: nethelpers.Full,
		}
		out = append(out, link)
		out = append(out, pciDevice(pciID, "02", "00", model.VendorID, model.ProductID, model.Vendor, model.Product, model.Driver))
	}

	// The booting NIC's address, from the site DHCP (10.<index>/8: unique per machine).
	addr := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(id.Index >> 16), byte(id.Index >> 8), byte(id.Index)}), 8) //nolint:gosec // the low 24 bits, on purpose
	first := fmt.Sprintf("enp%ds0f0", 0x40)

	address := network.NewAddressStatus(network.NamespaceName, first+"/"+addr.String())
	*address.TypedSpec() = network.AddressStatusSpec{
		Address: addr, Local: addr.Addr(), LinkIndex: 2, LinkName: first, Family: nethelpers.FamilyInet4, Scope: nethelpers.ScopeGlobal,
	}
	out = append(out, address)

	route := network.NewRouteStatus(network.NamespaceName, "inet4/10.0.0.1//1024")
	*route.TypedSpec() = network.RouteStatusSpec{
		Family: nethelpers.FamilyInet4, Gateway: netip.MustParseAddr("10.0.0.1"), OutLinkIndex: 2, OutLinkName: first,
		Table: nethelpers.TableMain, Priority: 1024, Scope: nethelpers.ScopeGlobal, Type: nethelpers.TypeUnicast, Protocol: nethelpers.ProtocolBoot,
	}
	out = append(out, route)

	hostname := network.NewHostnameStatus(network.NamespaceName, network.HostnameID)
	*hostname.TypedSpec() = network.HostnameStatusSpec{Hostname: "sim-" + id.UUID[:8]}
	out = append(out, hostname)

	encoded, err := resourcewire.Encode(out)
	if err != nil {
		return nil, fmt.Errorf("error encoding the inventory of machine %d: %w", id.Index, err)
	}

	return encoded, nil
}

func pciDevice(id, class, subclass, vendorID, productID, vendor, product, driver string) *hardware.PCIDevice {
	dev := hardware.NewPCIDeviceInfo(id)
	*dev.TypedSpec() = hardware.PCIDeviceSpec{
		ClassID: "0x" + class, SubclassID: "0x" + subclass, VendorID: "0x" + vendorID, ProductID: "0x" + productID,
		Vendor: vendor, Product: product, Driver: driver,
	}

	switch class {
	case "01":
		dev.TypedSpec().Class, dev.TypedSpec().Subclass = "Mass storage controller", "Non-Volatile memory controller"
	case "02":
		dev.TypedSpec().Class, dev.TypedSpec().Subclass = "Network controller", "Ethernet controller"
	}

	return dev
}
