package anvilctl

import (
	"fmt"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
)

// wideHeader are the columns -o wide adds to 'get machines': what a person needs to
// decide whether to accept a pending machine, from its agent's inventory and its BMC.
var wideHeader = []string{"VENDOR", "MODEL", "SERIAL", "CPU", "MEMORY", "DISKS", "MACS", "BMC", "EXTENSIONS", "KEXEC"}

func (v machineView) wideRow() []string {
	row := []string{"-", "-", "-", "-", "-", "-", "-", "-", "-", "-"}

	if inv := v.Inventory; inv != nil {
		row[0] = orDash(inv.System.Manufacturer)
		row[1] = orDash(inv.System.Product)
		row[2] = orDash(inv.System.Serial)

		if len(inv.CPUs) > 0 {
			var cores, threads uint32

			for _, c := range inv.CPUs {
				cores += c.Cores
				threads += c.Threads
			}

			row[3] = fmt.Sprintf("%dx %s, %dc/%dt", len(inv.CPUs), orDash(inv.CPUs[0].Model), cores, threads)
		}

		if inv.MemoryMiB > 0 {
			row[4] = memory(inv.MemoryMiB)
		}

		disks := make([]string, 0, len(inv.Disks))
		for _, d := range inv.Disks {
			if !d.CDROM && d.Size > 0 {
				disks = append(disks, d.Name+":"+size(d.Size))
			}
		}

		row[5] = orDash(strings.Join(disks, ","))
	}

	row[6] = orDash(strings.Join(v.macs(), ","))
	row[7] = v.bmcAddress()
	row[8] = orDash(strings.Join(v.extensions(), ","))
	row[9] = v.kexec()

	return row
}

// extensions are the official extensions the machine's hardware calls for, from its
// anvil.dev/ext-* labels (an optional one marked so).
func (v machineView) extensions() []string {
	var out []string

	for k, value := range v.Labels {
		name, ok := strings.CutPrefix(k, labelExtensionPrefix)
		if !ok {
			continue
		}

		if value == "optional" {
			name += "?"
		}

		out = append(out, name)
	}

	slices.Sort(out)

	return out
}

// kexec is how the machine is handed to Talos: its mode, and "blocked" when auto meets
// the deny list (or an agent that cannot).
func (v machineView) kexec() string {
	mode := v.Intent.Kexec
	if mode == "" {
		mode = "default"
	}

	if v.Status != nil && len(v.Status.KexecBlockers) > 0 {
		mode += " (blocked)"
	}

	return mode
}

// labelExtensionPrefix is the provider's controllers.LabelExtensionPrefix, the derived
// labels of suggested extensions.
const labelExtensionPrefix = "anvil.dev/ext-"

// macs are the machine's physical NICs as its agent saw them, else those seen booting.
func (v machineView) macs() []string {
	if v.Inventory != nil && len(v.Inventory.NICs) > 0 {
		out := make([]string, 0, len(v.Inventory.NICs))
		for _, n := range v.Inventory.NICs {
			if n.MAC != "" {
				out = append(out, n.MAC)
			}
		}

		return out
	}

	return v.Machine.MACs
}

// bmcAddress is the BMC the provider drives (its config), else the one the agent read.
func (v machineView) bmcAddress() string {
	switch {
	case v.BMC != nil && v.BMC.Address != "":
		if v.BMC.Port != 0 {
			return net.JoinHostPort(v.BMC.Address, strconv.Itoa(int(v.BMC.Port)))
		}

		return v.BMC.Address
	case v.Inventory != nil && v.Inventory.BMC != nil && v.Inventory.BMC.Address != "":
		return v.Inventory.BMC.Address
	}

	return "-"
}

// memory prints MiB as GiB ("96GiB", "1.5GiB") or MiB below one GiB.
func memory(mib uint64) string {
	if mib < 1024 {
		return fmt.Sprintf("%dMiB", mib)
	}

	return strconv.FormatFloat(float64(mib)/1024, 'f', -1, 64) + "GiB"
}

// size prints bytes in the disk makers' decimal units: "960G", "4T", "1.9T".
func size(b uint64) string {
	for _, u := range []struct {
		unit string
		n    float64
	}{{"T", 1e12}, {"G", 1e9}, {"M", 1e6}} {
		if float64(b) >= u.n {
			return strconv.FormatFloat(math.Round(float64(b)/u.n*10)/10, 'f', -1, 64) + u.unit
		}
	}

	return strconv.FormatUint(b, 10) + "B"
}
