package inventory

import (
	"sync"

	"github.com/anvil-metal/anvil/extensions"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// The catalog and deny list are embedded and checked by their own tests: loaded once.
var (
	catalog  = sync.OnceValues(extensions.Load)
	denyList = sync.OnceValues(extensions.LoadDenyList)
)

// Hardware is what the extensions catalog and the kexec deny list read of an inventory.
func Hardware(spec *resources.MachineInventorySpec) extensions.Hardware {
	var hw extensions.Hardware

	if spec == nil {
		return hw
	}

	for _, d := range spec.PCIDevices {
		hw.PCI = append(hw.PCI, extensions.PCIDevice{
			VendorID: d.VendorID, ProductID: d.ProductID, ClassID: d.ClassID, SubclassID: d.SubclassID, Driver: d.Driver,
		})
	}

	for _, c := range spec.CPUs {
		hw.CPUs = append(hw.CPUs, extensions.CPU{Vendor: c.Manufacturer, Family: c.Model})
	}

	for _, n := range spec.NICs {
		if n.Driver != "" {
			hw.Drivers = append(hw.Drivers, n.Driver)
		}
	}

	return hw
}

// SuggestedExtensions are the official extensions the machine's hardware calls for,
// for the Talos version ("" for any version).
func SuggestedExtensions(spec *resources.MachineInventorySpec, talosVersion string) []extensions.Suggestion {
	c, err := catalog()
	if err != nil || spec == nil {
		return nil
	}

	return c.Suggest(Hardware(spec), talosVersion)
}

// KexecBlockers say why the machine is not to be kexec'd: its agent cannot, or its
// hardware is known to break across one (the deny list's reasons); none when neither.
func KexecBlockers(spec *resources.MachineInventorySpec) []string {
	if spec == nil {
		return nil
	}

	var out []string

	if spec.KexecUnavailable != "" {
		out = append(out, "agent: "+spec.KexecUnavailable)
	}

	if d, err := denyList(); err == nil {
		out = append(out, d.Match(Hardware(spec))...)
	}

	return out
}
