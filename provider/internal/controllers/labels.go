package controllers

import (
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"

	"github.com/anvil-metal/anvil/internal/disksel"
	"github.com/anvil-metal/anvil/provider/internal/identity"
	"github.com/anvil-metal/anvil/provider/internal/inventory"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// Derived label keys, all under resources.LabelPrefix. README lists them.
const (
	LabelArch        = resources.LabelPrefix + "arch"
	LabelVendor      = resources.LabelPrefix + "vendor"
	LabelModel       = resources.LabelPrefix + "model"
	LabelCPUVendor   = resources.LabelPrefix + "cpu-vendor"
	LabelCPUCores    = resources.LabelPrefix + "cpu-cores"
	LabelMemoryClass = resources.LabelPrefix + "memory-class"
	LabelDiskCount   = resources.LabelPrefix + "disk-count"
	LabelDiskType    = resources.LabelPrefix + "disk-type"
	LabelNICSpeed    = resources.LabelPrefix + "nic-speed"
	// LabelExtensionPrefix starts one label per official extension the machine's
	// hardware calls for: anvil.dev/ext-intel-ucode=suggested (or optional).
	LabelExtensionPrefix = resources.LabelPrefix + "ext-"
	// LabelIdentity says how the machine proves who it is: tpm (its agent proved a TPM's
	// EK, recorded on the machine) or none (its agent showed no TPM).
	LabelIdentity = resources.LabelPrefix + "identity"
	// LabelInstallDisk says whether the provider's --install-disk resolves on the
	// machine's disks: resolved (to one disk with a serial or WWID of its own), ambiguous
	// (several) or none; a selector (a machine class in Omni, a MetalMachine's) can ask
	// for machines it resolves on.
	LabelInstallDisk = resources.LabelPrefix + "install-disk"
)

// InstallDiskLabel is LabelInstallDisk's value for the machine's inventory ("" without a
// selector or an inventory).
func InstallDiskLabel(sel disksel.Selector, inv *resources.MachineInventorySpec) string {
	if sel.IsZero() || inv == nil {
		return ""
	}

	_, _, err := sel.ResolveIdentity(inventory.Disks(inv))

	var selErr *disksel.Error

	switch {
	case errors.As(err, &selErr) && len(selErr.Matches) == 0:
		return "none"
	case err != nil:
		return "ambiguous" // several disks, or one Talos' config cannot tell from another
	}

	return "resolved"
}

// placeholders are what firmware writes where a vendor left a field empty: a label
// saying "to-be-filled-by-o.e.m" would group unrelated machines.
var placeholders = map[string]bool{
	"":                       true,
	"to be filled by o.e.m.": true,
	"default string":         true,
	"system manufacturer":    true,
	"system product name":    true,
	"not specified":          true,
	"not available":          true,
	"none":                   true,
	"n/a":                    true,
	"unknown":                true,
	"0123456789":             true,
}

// DeriveLabels returns the labels a machine's hardware earns: arch from its PXE boot,
// the rest from its agent's inventory (nil until one is reported). Values are lower
// case and valid label values; a fact not known gives no label rather than a guess.
func DeriveLabels(machine *resources.MachineSpec, inv *resources.MachineInventorySpec) map[string]string {
	labels := map[string]string{}

	set := func(key, value string) {
		if v := resources.SanitizeLabelValue(strings.ToLower(value)); v != "" {
			labels[key] = v
		}
	}

	if machine != nil {
		set(LabelArch, machine.Arch)
	}

	// A machine's identity is known once an agent of it proved an EK, or registered
	// without one (its inventory is in).
	switch {
	case machine != nil && machine.EK != "":
		set(LabelIdentity, string(identity.KindTPM))
	case inv != nil:
		set(LabelIdentity, string(identity.KindNone))
	}

	if inv == nil {
		return labels
	}

	if !placeholders[strings.ToLower(strings.TrimSpace(inv.System.Manufacturer))] {
		set(LabelVendor, inv.System.Manufacturer)
	}

	if !placeholders[strings.ToLower(strings.TrimSpace(inv.System.Product))] {
		set(LabelModel, inv.System.Product)
	}

	var cores uint32

	for _, cpu := range inv.CPUs {
		cores += cpu.Cores
	}

	if len(inv.CPUs) > 0 {
		set(LabelCPUVendor, cpuVendor(inv.CPUs[0].Manufacturer))
	}

	if cores > 0 {
		set(LabelCPUCores, strconv.FormatUint(uint64(cores), 10))
	}

	set(LabelMemoryClass, MemoryClass(inv.MemoryMiB))

	count, kind := diskSummary(inv.Disks)
	set(LabelDiskCount, strconv.Itoa(count))
	set(LabelDiskType, kind)

	set(LabelNICSpeed, nicSpeed(inv.NICs))

	// The official extensions its hardware calls for (the extensions catalog): one
	// label each, so that a selector (or Omni's machine class) can ask for them.
	for _, sg := range inventory.SuggestedExtensions(inv, "") {
		value := "suggested"
		if sg.Optional {
			value = "optional"
		}

		key := LabelExtensionPrefix + strings.TrimPrefix(sg.Extension, "siderolabs/")
		if resources.ValidateLabelKey(key) == nil {
			labels[key] = value
		}
	}

	return labels
}

// cpuVendor names the CPU maker as a selector would: SMBIOS says "Intel(R) Corporation"
// on one machine and "GenuineIntel" on the next.
func cpuVendor(manufacturer string) string {
	m := strings.ToLower(manufacturer)

	switch {
	case placeholders[strings.TrimSpace(m)]:
		return ""
	case strings.Contains(m, "intel"):
		return "intel"
	case strings.Contains(m, "amd") || strings.Contains(m, "advanced micro"):
		return "amd"
	case strings.Contains(m, "ampere"):
		return "ampere"
	}

	return m
}

// MemoryClass is the bucket of a machine's memory: the largest power of two GiB not
// above it ("64gib" for 64 to 127 GiB; "1tib" and up from 1024 GiB), "lt1gib" below
// 1 GiB, "" when the memory is not known. Machines of one class pass the same selector
// whatever their exact module mix.
func MemoryClass(mib uint64) string {
	if mib == 0 {
		return ""
	}

	gib := mib / 1024
	if gib == 0 {
		return "lt1gib"
	}

	class := uint64(1) << (bits.Len64(gib) - 1)
	if class >= 1024 {
		return fmt.Sprintf("%dtib", class/1024)
	}

	return fmt.Sprintf("%dgib", class)
}

// diskSummary counts the disks Talos could install to and names their kind: nvme, ssd
// or hdd, mixed when they differ, "" without disks. CD-ROMs, read-only media and
// device-mapper volumes are not disks of the machine.
func diskSummary(disks []resources.DiskInventory) (int, string) {
	count, kind := 0, ""

	for _, d := range disks {
		if d.CDROM || d.Readonly || d.Transport == "dm" || d.Size == 0 {
			continue
		}

		k := "ssd"

		switch {
		case d.Transport == "nvme":
			k = "nvme"
		case d.Rotational:
			k = "hdd"
		}

		switch {
		case count == 0:
			kind = k
		case kind != k:
			kind = "mixed"
		}

		count++
	}

	return count, kind
}

// nicSpeed is the fastest physical link's speed: "25g", "2.5g", "100m"; "" when no NIC
// reports one (links down report none).
func nicSpeed(nics []resources.NICInventory) string {
	var fastest int64

	for _, n := range nics {
		fastest = max(fastest, n.SpeedMbps)
	}

	switch {
	case fastest <= 0:
		return ""
	case fastest < 1000:
		return fmt.Sprintf("%dm", fastest)
	case fastest%1000 == 0:
		return fmt.Sprintf("%dg", fastest/1000)
	default:
		return strconv.FormatFloat(float64(fastest)/1000, 'f', -1, 64) + "g"
	}
}
