package talosbuild

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/anvil-metal/anvil/imager/internal/elfdeps"
	"github.com/anvil-metal/anvil/internal/installerimage"
)

// installerPrograms are the Debian programs Talos' installer runs (grub-mkimage for the
// BIOS and UEFI GRUB images, mkfs for its partitions), by path in the unpacked tree; they
// go to /usr/bin under their own names.
var installerPrograms = []string{
	"/usr/bin/grub-mkimage",
	"/usr/bin/grub-editenv",
	"/usr/sbin/grub-install",
	"/usr/sbin/grub-probe",
	"/usr/sbin/mkfs.xfs",
	"/usr/sbin/xfs_repair",
	"/usr/sbin/xfs_growfs",
	"/usr/sbin/mkfs.fat",
}

// installerData are data trees the programs read: GRUB's modules (BIOS and UEFI) and
// fonts.
var installerData = []string{"/usr/lib/grub/i386-pc", "/usr/lib/grub/x86_64-efi", "/usr/share/grub"}

// systemd-boot, which Talos installs on UEFI machines, and its stub (constants.SDBootAssetPath,
// SDStubAssetPath).
var installerEFI = map[string]string{
	"/usr/lib/systemd/boot/efi/systemd-bootx64.efi": "/usr/install/amd64/systemd-boot.efi",
	"/usr/lib/systemd/boot/efi/linuxx64.efi.stub":   "/usr/install/amd64/systemd-stub.efi",
}

// writeInstallerBase lays the installer image's base out in dir and writes it as the
// uncompressed layer installer-base.tar: Talos' installer (also imager, by argv[0]), the
// Debian programs it runs with the libraries they load, GRUB's modules, systemd-boot.
func writeInstallerBase(_ context.Context, opts Options, dir string) error {
	t := tree{root: dir}
	deb := tree{root: filepath.Join(opts.Debian, "installer", "root")}

	if err := fhs(t); err != nil {
		return err
	}

	if err := t.copyFile(filepath.Join(opts.Bins, "installer"), "/usr/bin/installer", 0o755); err != nil {
		return err
	}

	if err := t.symlink("installer", "/usr/bin/imager"); err != nil {
		return err
	}

	files, err := elfdeps.Closure(deb.root, installerPrograms, nil)
	if err != nil {
		return fmt.Errorf("error finding what the installer's programs load: %w", err)
	}

	for _, f := range files {
		if err := t.copyFrom(deb, f); err != nil {
			return err
		}
	}

	for _, p := range installerPrograms {
		if err := t.copyFile(deb.host(p), "/usr/bin/"+filepath.Base(p), 0o755); err != nil {
			return err
		}
	}

	if err := t.symlink("mkfs.fat", "/usr/bin/mkfs.vfat"); err != nil {
		return err
	}

	for _, d := range installerData {
		if err := t.copyFrom(deb, d); err != nil {
			return err
		}
	}

	for from, to := range installerEFI {
		if err := t.copyFile(deb.host(from), to, 0o644); err != nil {
			return err
		}
	}

	if err := t.copyFile(deb.host(xfsConfigDebian), xfsConfig, 0o644); err != nil {
		return err
	}

	out, err := os.Create(filepath.Join(opts.Out, InstallerBaseFile))
	if err != nil {
		return fmt.Errorf("error creating the installer's base layer: %w", err)
	}

	if err := installerimage.WriteTree(out, dir, opts.MTime); err != nil {
		out.Close()

		return fmt.Errorf("error writing the installer's base layer: %w", err)
	}

	return out.Close() //nolint:wrapcheck // the caller says what was written
}
