// Package kmod picks the kernel modules the agent's initramfs ships, from the kernel's
// module index (internal/modules): a selection by name with its full dependency closure,
// the index files rendered for the selection, the module files, and the firmware they
// ask for.
package kmod

import (
	"fmt"
	"path"
	"sort"
	"strings"

	"github.com/anvil-metal/anvil/internal/modules"
)

// DefaultPatterns are the modules the agent needs on common server hardware: NICs, storage
// controllers, IPMI, and what SideroLink and VLANs need. Anything built into the kernel is
// simply reported as built in.
var DefaultPatterns = []string{
	// NICs: Intel, Broadcom, Mellanox, Realtek, QLogic, virtual.
	"e1000", "e1000e", "igb", "igc", "ixgbe", "i40e", "ice",
	"tg3", "bnx2", "bnx2x", "bnxt_en",
	"mlx4_en", "mlx5_core",
	"r8169", "qede",
	"virtio_net", "virtio_pci", "vmxnet3",
	// Storage: NVMe, AHCI, SAS/RAID HBAs, virtual, USB.
	"nvme", "ahci", "ata_piix",
	"mpt3sas", "mpi3mr", "megaraid_sas", "smartpqi", "aacraid", "hpsa",
	"virtio_blk", "virtio_scsi", "vmw_pvscsi",
	"sd_mod", "sr_mod", "usb_storage", "uas", "xhci_pci", "ehci_pci",
	// IPMI: the agent talks to the local BMC.
	"ipmi_msghandler", "ipmi_si", "ipmi_devintf", "ipmi_ssif",
	// Networking the agent does itself. SideroLink: kernel WireGuard, as Talos runs it
	// (Select adds its crypto and UDP tunnel dependencies), and TUN for wireguard-go where
	// WireGuard will not load. VLANs.
	"wireguard", "tun", "8021q",
	// EFI variables, to read and set the boot order.
	"efivarfs",
	// TPM 2.0, the machine's identity (/dev/tpmrm0): the TIS and CRB interfaces most
	// servers and QEMU's tpm-tis and tpm-crb use (built into Debian's kernel), and the
	// SPI and I2C ones some boards wire theirs to.
	"tpm", "tpm_tis", "tpm_crb", "tpm_tis_spi", "tpm_tis_i2c_cr50", "tpm_i2c_infineon", "tpm_i2c_nuvoton", "tpm_i2c_atmel",
}

// Selection is a closed set of modules: every dependency of a member is a member.
type Selection struct {
	Index *modules.Index
	// Names of the selected modules, sorted.
	Names []string
	// Builtin are patterns naming modules built into the kernel (nothing to ship).
	Builtin []string
	// Unmatched are patterns that matched no module, loadable or built in.
	Unmatched []string

	set map[string]bool
}

// Select picks the modules whose names match patterns (path.Match globs over normalised
// names; a pattern with a '/' is a path prefix, e.g. "kernel/drivers/net/ethernet/"), then
// adds their dependencies from modules.dep and their soft dependencies, transitively,
// because modprobe would load those too. A dependency the index does not know is an
// error: the initramfs would ship a module that cannot load.
func Select(ix *modules.Index, patterns []string) (*Selection, error) {
	s := &Selection{Index: ix, set: map[string]bool{}}

	var queue []string

	for _, p := range patterns {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}

		matched := false

		for m := range ix.Modules() {
			ok, err := matches(p, m)
			if err != nil {
				return nil, fmt.Errorf("error matching module pattern %q: %w", p, err)
			}

			if ok {
				matched = true

				queue = append(queue, m.Name)
			}
		}

		switch {
		case matched:
		case ix.Builtin(p):
			s.Builtin = append(s.Builtin, p)
		default:
			s.Unmatched = append(s.Unmatched, p)
		}
	}

	wantedBy := map[string]string{}

	for len(queue) > 0 {
		name := queue[0]
		queue = queue[1:]

		if s.set[name] {
			continue
		}

		m, ok := ix.Module(name)
		if !ok {
			if ix.Builtin(name) {
				continue
			}

			return nil, fmt.Errorf("error selecting modules: %s needs %s, which is neither in modules.dep nor built in", wantedBy[name], name)
		}

		s.set[name] = true

		for _, dep := range m.Deps {
			queue = append(queue, dep)
			wantedBy[dep] = name
		}

		for _, soft := range ix.Softdeps(name) {
			queue = append(queue, ix.Resolve(soft)...)
		}
	}

	for name := range s.set {
		s.Names = append(s.Names, name)
	}

	sort.Strings(s.Names)

	return s, nil
}

func matches(pattern string, m modules.Module) (bool, error) {
	if strings.Contains(pattern, "/") {
		return strings.HasPrefix(m.Path, pattern), nil
	}

	return path.Match(strings.ReplaceAll(pattern, "-", "_"), m.Name)
}
