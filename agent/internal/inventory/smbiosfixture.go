package inventory

import (
	"fmt"

	"github.com/siderolabs/go-smbios/smbios"
	"github.com/siderolabs/talos/pkg/machinery/resources/hardware"
	"go.uber.org/zap"
)

// FromSMBIOS maps an SMBIOS table to the resources the collector would publish from it
// (system information, processors, memory modules), without a runtime: for simulated
// machines built from SMBIOS dumps (agent/internal/fleetsim).
func FromSMBIOS(table []byte, version smbios.Version) (*Inventory, error) {
	info, err := decodeSMBIOS(table, version, zap.NewNop())
	if err != nil {
		return nil, err
	}

	in := info.SystemInformation
	system := hardware.NewSystemInformation(hardware.SystemInformationID)
	*system.TypedSpec() = hardware.SystemInformationSpec{
		Manufacturer: in.Manufacturer, ProductName: in.ProductName, Version: in.Version,
		BIOSVersion: info.BIOSInformation.Version, SerialNumber: in.SerialNumber, UUID: in.UUID,
		WakeUpType: in.WakeUpType.String(), SKUNumber: in.SKUNumber,
	}

	inv := &Inventory{System: system}
	ids := idSet{}

	for i, p := range info.ProcessorInformation {
		res := hardware.NewProcessorInfo(ids.unique(p.SocketDesignation, "CPU", i))
		*res.TypedSpec() = processorSpec(&p)
		inv.Processors = append(inv.Processors, res)
	}

	ids = idSet{}

	for i, m := range info.MemoryDevices {
		res := hardware.NewMemoryModuleInfo(ids.unique(m.DeviceLocator, "DIMM", i))
		*res.TypedSpec() = memoryModuleSpec(&m)
		inv.MemoryModules = append(inv.MemoryModules, res)
	}

	if len(inv.Processors) == 0 && len(inv.MemoryModules) == 0 && in.UUID == "" {
		return nil, fmt.Errorf("the SMBIOS table has no system, processor or memory information")
	}

	return inv, nil
}
