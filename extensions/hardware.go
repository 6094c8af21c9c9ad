// Package extensions maps a machine's hardware to the official Talos system extensions it
// needs (the catalog, catalog.yaml) and names the hardware that must not be booted through
// kexec (the deny list, kexec-deny.yaml). Both are reviewed YAML files embedded in the
// binary; everything here is a pure function of them and of the Hardware it is given.
package extensions

// Hardware is what the catalog reads of a machine; the provider adapts its inventory to it.
type Hardware struct {
	PCI  []PCIDevice
	CPUs []CPU
	// Drivers are drivers bound to devices reported apart from PCI (NICs, USB devices…).
	Drivers []string
}

// PCIDevice is one PCI function. IDs are hex as sysfs or Talos print them: "14e4",
// "0x14e4" and "14E4" read the same; a malformed ID matches nothing.
type PCIDevice struct {
	VendorID   string
	ProductID  string
	ClassID    string
	SubclassID string
	// Driver is the bound driver ("" for none).
	Driver string
}

// CPU is one processor socket.
type CPU struct {
	// Vendor is the manufacturer as SMBIOS or /proc/cpuinfo reports it:
	// "Intel(R) Corporation", "GenuineIntel", "Advanced Micro Devices, Inc.", "AuthenticAMD"…
	Vendor string
	// Family is optional (SMBIOS processor family, e.g. "Xeon").
	Family string
}
