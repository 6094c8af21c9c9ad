package resources

import (
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/resource/meta"
	"github.com/cosi-project/runtime/pkg/resource/protobuf"
	"github.com/cosi-project/runtime/pkg/resource/typed"
)

// MachineInventoryType is the type of the MachineInventory resource.
const MachineInventoryType = resource.Type("MachineInventories.anvil.dev")

// MachineInventory is what the agent found on a machine, summarised from the Talos
// resources it reported: what a person needs to decide on a machine, and what labels are
// derived from. MachineInventoryController is its only writer.
type MachineInventory = typed.Resource[MachineInventorySpec, MachineInventoryExtension]

// MachineInventorySpec is a machine's hardware.
type MachineInventorySpec struct {
	AgentVersion string    `yaml:"agentVersion,omitempty" protobuf:"1"`
	BootID       string    `yaml:"bootID,omitempty" protobuf:"2"`
	ReportedAt   time.Time `yaml:"reportedAt" protobuf:"3"`

	System     SystemInventory   `yaml:"system" protobuf:"4"`
	CPUs       []CPUInventory    `yaml:"cpus,omitempty" protobuf:"5"`
	Memory     []MemoryInventory `yaml:"memory,omitempty" protobuf:"6"`
	MemoryMiB  uint64            `yaml:"memoryMiB" protobuf:"7"`
	Disks      []DiskInventory   `yaml:"disks,omitempty" protobuf:"8"`
	NICs       []NICInventory    `yaml:"nics,omitempty" protobuf:"9"`
	PCIDevices []PCIInventory    `yaml:"pciDevices,omitempty" protobuf:"10"`
	Hostname   string            `yaml:"hostname,omitempty" protobuf:"11"`
	BMC        *BMCInventory     `yaml:"bmc,omitempty" protobuf:"12"`
	// KexecUnavailable is why the agent said it cannot kexec ("" when it can).
	KexecUnavailable string `yaml:"kexecUnavailable,omitempty" protobuf:"13"`
	// Arrays are the md RAID arrays and LVM physical volumes on the disks, as their
	// metadata says (the agent assembles neither).
	Arrays []ArrayInventory `yaml:"arrays,omitempty" protobuf:"14"`
}

// ArrayInventory is an md RAID array, or an LVM physical volume, and the devices that
// hold it.
type ArrayInventory struct {
	// Kind is md or lvm.
	Kind string `yaml:"kind" protobuf:"1"`
	// ID is the md array's UUID (every member carries it), or the LVM PV's.
	ID string `yaml:"id" protobuf:"2"`
	// Name is the md array's name.
	Name string `yaml:"name,omitempty" protobuf:"3"`
	// Members are the devices holding it: disks or partitions (sda, sdb1).
	Members []string `yaml:"members" protobuf:"4"`
}

// SystemInventory is the SMBIOS system information.
type SystemInventory struct {
	Manufacturer string `yaml:"manufacturer,omitempty" protobuf:"1"`
	Product      string `yaml:"product,omitempty" protobuf:"2"`
	Serial       string `yaml:"serial,omitempty" protobuf:"3"`
	UUID         string `yaml:"uuid,omitempty" protobuf:"4"`
	SKU          string `yaml:"sku,omitempty" protobuf:"5"`
	BIOSVersion  string `yaml:"biosVersion,omitempty" protobuf:"6"`
}

// CPUInventory is one processor socket.
type CPUInventory struct {
	Socket       string `yaml:"socket,omitempty" protobuf:"1"`
	Manufacturer string `yaml:"manufacturer,omitempty" protobuf:"2"`
	Model        string `yaml:"model,omitempty" protobuf:"3"`
	Cores        uint32 `yaml:"cores,omitempty" protobuf:"4"`
	Threads      uint32 `yaml:"threads,omitempty" protobuf:"5"`
	MaxSpeedMHz  uint32 `yaml:"maxSpeedMHz,omitempty" protobuf:"6"`
}

// MemoryInventory is one memory module.
type MemoryInventory struct {
	Locator      string `yaml:"locator,omitempty" protobuf:"1"`
	SizeMiB      uint32 `yaml:"sizeMiB" protobuf:"2"`
	SpeedMTs     uint32 `yaml:"speedMTs,omitempty" protobuf:"3"`
	Manufacturer string `yaml:"manufacturer,omitempty" protobuf:"4"`
}

// DiskInventory is one block device.
type DiskInventory struct {
	Name       string `yaml:"name" protobuf:"1"`
	Size       uint64 `yaml:"size" protobuf:"2"`
	Model      string `yaml:"model,omitempty" protobuf:"3"`
	Serial     string `yaml:"serial,omitempty" protobuf:"4"`
	WWID       string `yaml:"wwid,omitempty" protobuf:"5"`
	Transport  string `yaml:"transport,omitempty" protobuf:"6"`
	Rotational bool   `yaml:"rotational,omitempty" protobuf:"7"`
	Readonly   bool   `yaml:"readonly,omitempty" protobuf:"8"`
	CDROM      bool   `yaml:"cdrom,omitempty" protobuf:"9"`
	BusPath    string `yaml:"busPath,omitempty" protobuf:"10"`
}

// NICInventory is one physical network interface.
type NICInventory struct {
	Name      string   `yaml:"name" protobuf:"1"`
	MAC       string   `yaml:"mac,omitempty" protobuf:"2"`
	Driver    string   `yaml:"driver,omitempty" protobuf:"3"`
	SpeedMbps int64    `yaml:"speedMbps,omitempty" protobuf:"4"`
	LinkUp    bool     `yaml:"linkUp" protobuf:"5"`
	Vendor    string   `yaml:"vendor,omitempty" protobuf:"6"`
	Product   string   `yaml:"product,omitempty" protobuf:"7"`
	PCIID     string   `yaml:"pciID,omitempty" protobuf:"8"`
	Addresses []string `yaml:"addresses,omitempty" protobuf:"9"`
}

// PCIInventory is one PCI device.
type PCIInventory struct {
	ID        string `yaml:"id" protobuf:"1"`
	Class     string `yaml:"class,omitempty" protobuf:"2"`
	Vendor    string `yaml:"vendor,omitempty" protobuf:"3"`
	Product   string `yaml:"product,omitempty" protobuf:"4"`
	VendorID  string `yaml:"vendorID" protobuf:"5"`
	ProductID string `yaml:"productID" protobuf:"6"`
	Driver    string `yaml:"driver,omitempty" protobuf:"7"`
	// ClassID and SubclassID are the PCI class codes (hex): what the extensions catalog
	// and the kexec deny list match device kinds on.
	ClassID    string `yaml:"classID,omitempty" protobuf:"8"`
	SubclassID string `yaml:"subclassID,omitempty" protobuf:"9"`
}

// BMCInventory is what the agent read of the BMC.
type BMCInventory struct {
	Address string `yaml:"address,omitempty" protobuf:"1"`
	Port    uint32 `yaml:"port,omitempty" protobuf:"2"`
}

// NewMachineInventory returns an empty inventory for the machine.
func NewMachineInventory(id resource.ID) *MachineInventory {
	return typed.NewResource[MachineInventorySpec, MachineInventoryExtension](
		resource.NewMetadata(NamespaceName, MachineInventoryType, id, resource.VersionUndefined),
		MachineInventorySpec{},
	)
}

// MachineInventoryExtension provides the resource definition of MachineInventory.
type MachineInventoryExtension struct{}

// ResourceDefinition implements typed.Extension.
func (MachineInventoryExtension) ResourceDefinition() meta.ResourceDefinitionSpec {
	return meta.ResourceDefinitionSpec{
		Type:             MachineInventoryType,
		Aliases:          []resource.Type{"inventory", "inventories", "machineinventory", "inv"},
		DefaultNamespace: NamespaceName,
		PrintColumns: []meta.PrintColumn{
			{Name: "Manufacturer", JSONPath: "{.system.manufacturer}"},
			{Name: "Product", JSONPath: "{.system.product}"},
			{Name: "Serial", JSONPath: "{.system.serial}"},
			{Name: "Memory MiB", JSONPath: "{.memoryMiB}"},
		},
	}
}

func init() {
	mustRegister(protobuf.RegisterDynamic[MachineInventorySpec](MachineInventoryType, &MachineInventory{}))
}
