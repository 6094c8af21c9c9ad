package bootassets

import (
	"bytes"
	"debug/pe"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/anvil-metal/anvil/internal/uki"
)

// OSRelease is the UKI's .osrel: the stub ignores it, boot menus and tools that list UKIs
// show it.
const OSRelease = "ID=anvil\nNAME=\"Anvil metal agent\"\nPRETTY_NAME=\"Anvil metal agent\"\n"

// stubMachines are the PE machine types a stub must have for an architecture.
var stubMachines = map[string]uint16{
	"amd64": pe.IMAGE_FILE_MACHINE_AMD64,
	"arm64": pe.IMAGE_FILE_MACHINE_ARM64,
}

// writeUKI bundles the kernel, the initramfs just written and the cmdline into
// agent-<arch>.efi with the systemd-boot stub opts.UKIStub, and writes the stub beside it
// as uki-stub-<arch>.efi: the provider builds each machine's UKI from it, with the
// machine's own command line (UEFI HTTP boot passes the image no arguments).
func writeUKI(opts Options, res *Result) error {
	stub, err := os.ReadFile(opts.UKIStub)
	if err != nil {
		return fmt.Errorf("error reading the UKI stub: %w", err)
	}

	kernel, err := os.ReadFile(opts.Kernel.Image)
	if err != nil {
		return fmt.Errorf("error reading %s: %w", opts.Kernel.Image, err)
	}

	initrd, err := os.ReadFile(res.Initramfs)
	if err != nil {
		return fmt.Errorf("error reading %s: %w", res.Initramfs, err)
	}

	image, err := uki.Build(stub, kernel, initrd, strings.TrimSpace(opts.Cmdline), OSRelease)
	if err != nil {
		return fmt.Errorf("error building the UKI from %s: %w", opts.UKIStub, err)
	}

	// uki.Build has parsed the stub already, so this cannot fail on the format.
	f, err := pe.NewFile(bytes.NewReader(stub))
	if err != nil {
		return fmt.Errorf("error reading the UKI stub %s: %w", opts.UKIStub, err)
	}

	if want, ok := stubMachines[opts.Arch]; ok && f.Machine != want {
		return fmt.Errorf("UKI stub %s is for PE machine %#x, not %s (%#x)", opts.UKIStub, f.Machine, opts.Arch, want)
	}

	res.UKIStub = filepath.Join(opts.OutDir, "uki-stub-"+opts.Arch+".efi")
	if err := writeFile(res.UKIStub, stub); err != nil {
		return err
	}

	res.UKI = filepath.Join(opts.OutDir, "agent-"+opts.Arch+".efi")

	return writeFile(res.UKI, image)
}
