package anvilctl

import (
	"fmt"
	"strings"

	"github.com/anvil-metal/anvil/provider/internal/fleet"
)

// wideHeader are the columns -o wide adds to 'get machines': what a person needs to
// decide whether to accept a pending machine, from its agent's inventory and its BMC,
// and who holds an allocated one (the Cluster API manager names its MetalMachine), and
// the fingerprint of the TPM EK the machine must prove.
var wideHeader = []string{"VENDOR", "MODEL", "SERIAL", "CPU", "MEMORY", "DISKS", "MACS", "BMC", "EXTENSIONS", "KEXEC", "OWNER", "EK"}

func wideRow(v fleet.Record) []string {
	row := []string{"-", "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", orDash(v.EK())}

	if a := v.Intent.Allocation; a != nil && a.Owner != "" {
		row[10] = a.Owner
	}

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
			row[4] = fleet.Memory(inv.MemoryMiB)
		}

		disks := make([]string, 0, len(inv.Disks))
		for _, d := range inv.Disks {
			if !d.CDROM && d.Size > 0 {
				disks = append(disks, d.Name+":"+fleet.DiskSize(d.Size))
			}
		}

		row[5] = orDash(strings.Join(disks, ","))
	}

	row[6] = orDash(strings.Join(v.MACs(), ","))
	row[7] = orDash(v.BMCAddress())
	row[8] = orDash(strings.Join(v.Extensions(), ","))
	row[9] = v.KexecSummary()

	return row
}
