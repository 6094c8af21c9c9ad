// Package inventory turns what an agent reports — Talos machinery resources — into the
// summary the provider keeps on a machine.
package inventory

import (
	"cmp"
	"slices"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/siderolabs/talos/pkg/machinery/resources/hardware"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"

	"github.com/anvil-metal/anvil/internal/disksel"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// Summarize builds the inventory from the reported resources.
func Summarize(reported []resource.Resource) resources.MachineInventorySpec {
	var (
		spec       resources.MachineInventorySpec
		addresses  = map[string][]string{}
		arrayIndex = map[string]int{} // kind/ID: index in spec.Arrays
	)

	for _, r := range reported {
		switch r := r.(type) {
		case *hardware.SystemInformation:
			s := r.TypedSpec()
			spec.System = resources.SystemInventory{
				Manufacturer: s.Manufacturer, Product: s.ProductName, Serial: s.SerialNumber,
				UUID: s.UUID, SKU: s.SKUNumber, BIOSVersion: s.BIOSVersion,
			}
		case *hardware.Processor:
			s := r.TypedSpec()
			spec.CPUs = append(spec.CPUs, resources.CPUInventory{
				Socket: s.Socket, Manufacturer: s.Manufacturer, Model: s.ProductName,
				Cores: s.CoreCount, Threads: s.ThreadCount, MaxSpeedMHz: s.MaxSpeed,
			})
		case *hardware.MemoryModule:
			s := r.TypedSpec()
			if s.Size == 0 {
				continue // an empty slot
			}

			spec.Memory = append(spec.Memory, resources.MemoryInventory{
				Locator: s.DeviceLocator, SizeMiB: s.Size, SpeedMTs: s.Speed, Manufacturer: s.Manufacturer,
			})
			spec.MemoryMiB += uint64(s.Size)
		case *hardware.PCIDevice:
			s := r.TypedSpec()
			spec.PCIDevices = append(spec.PCIDevices, resources.PCIInventory{
				ID: r.Metadata().ID(), Class: s.Class, Vendor: s.Vendor, Product: s.Product,
				VendorID: s.VendorID, ProductID: s.ProductID, Driver: s.Driver, ClassID: s.ClassID, SubclassID: s.SubclassID,
			})
		case *block.Disk:
			s := r.TypedSpec()
			spec.Disks = append(spec.Disks, resources.DiskInventory{
				Name: r.Metadata().ID(), Size: s.Size, Model: s.Model, Serial: s.Serial, WWID: s.WWID,
				Transport: s.Transport, Rotational: s.Rotational, Readonly: s.Readonly, CDROM: s.CDROM, BusPath: s.BusPath,
			})
		case *block.DiscoveredVolume:
			spec.Arrays = addArrayMember(spec.Arrays, arrayIndex, r.Metadata().ID(), r.TypedSpec())
		case *network.LinkStatus:
			s := r.TypedSpec()
			if !s.Physical() {
				continue
			}

			spec.NICs = append(spec.NICs, resources.NICInventory{
				Name: r.Metadata().ID(), MAC: s.HardwareAddr.String(), Driver: s.Driver, SpeedMbps: int64(s.SpeedMegabits),
				LinkUp: s.OperationalState == nethelpers.OperStateUp, Vendor: s.Vendor, Product: s.Product, PCIID: s.PCIID,
			})
		case *network.AddressStatus:
			s := r.TypedSpec()
			if s.Scope == nethelpers.ScopeGlobal {
				addresses[s.LinkName] = append(addresses[s.LinkName], s.Address.String())
			}
		case *network.HostnameStatus:
			spec.Hostname = r.TypedSpec().FQDN()
		}
	}

	for i := range spec.NICs {
		spec.NICs[i].Addresses = addresses[spec.NICs[i].Name]
		slices.Sort(spec.NICs[i].Addresses)
	}

	// Resources arrive in whatever order the agent listed them; the summary is stable.
	slices.SortFunc(spec.CPUs, func(a, b resources.CPUInventory) int { return cmp.Compare(a.Socket, b.Socket) })
	slices.SortFunc(spec.Memory, func(a, b resources.MemoryInventory) int { return cmp.Compare(a.Locator, b.Locator) })
	slices.SortFunc(spec.Disks, func(a, b resources.DiskInventory) int { return cmp.Compare(a.Name, b.Name) })
	slices.SortFunc(spec.NICs, func(a, b resources.NICInventory) int { return cmp.Compare(a.Name, b.Name) })
	slices.SortFunc(spec.PCIDevices, func(a, b resources.PCIInventory) int { return cmp.Compare(a.ID, b.ID) })
	slices.SortFunc(spec.Arrays, func(a, b resources.ArrayInventory) int { return cmp.Compare(a.Kind+a.ID, b.Kind+b.ID) })

	for i := range spec.Arrays {
		slices.Sort(spec.Arrays[i].Members)
	}

	return spec
}

// Disks are the inventory's disks as disk selectors read them.
func Disks(inv *resources.MachineInventorySpec) []disksel.Disk {
	disks := make([]disksel.Disk, 0, len(inv.Disks))

	for _, d := range inv.Disks {
		disks = append(disks, disksel.Disk{
			Name: d.Name, Size: d.Size, Model: d.Model, Serial: d.Serial, WWID: d.WWID, Transport: d.Transport,
			BusPath: d.BusPath, Rotational: d.Rotational, CDROM: d.CDROM, Readonly: d.Readonly,
		})
	}

	return disks
}

// arrayKinds are the volumes that are members of something, by their signature's name.
var arrayKinds = map[string]string{"linux_raid_member": "md", "lvm2-pv": "lvm"}

// addArrayMember adds device to the array the volume says it is a member of (index finds
// it: a report holds thousands at most, each looked up once); other volumes are not arrays.
func addArrayMember(arrays []resources.ArrayInventory, index map[string]int, device string, v *block.DiscoveredVolumeSpec) []resources.ArrayInventory {
	kind, ok := arrayKinds[v.Name]
	if !ok {
		return arrays
	}

	id, name := v.UUID, v.Label
	if kind == "lvm" {
		id, name = v.Label, "" // blkid names an LVM PV by its UUID, as a label
	}

	key := kind + "/" + id
	if i, ok := index[key]; ok && id != "" {
		arrays[i].Members = append(arrays[i].Members, device)

		return arrays
	}

	index[key] = len(arrays)

	return append(arrays, resources.ArrayInventory{Kind: kind, ID: id, Name: name, Members: []string{device}})
}
