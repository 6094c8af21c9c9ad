package talosbuild

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"time"

	"github.com/anvil-metal/anvil/imager/internal/kmod"
	"github.com/anvil-metal/anvil/internal/initramfs"
	"github.com/anvil-metal/anvil/internal/modules"
)

// PreinitModules are what Talos' kernel has built in and a Debian kernel has as modules,
// needed before Talos' own udev loads modules from the rootfs: the rootfs mount (loop,
// squashfs, overlay), configfs (Talos' init mounts it), the lab's disks and NICs,
// SideroLink's WireGuard, the filesystems machined formats and mounts, EFI variables.
// The preinit loads them with their dependencies.
var PreinitModules = []string{
	"configfs", "loop", "squashfs", "overlay",
	"virtio_pci", "virtio_net", "virtio_blk", "virtio_scsi", "virtio-rng", "e1000", "e1000e",
	"nvme", "ahci", "sd_mod",
	"wireguard", "tun", "bridge", "br_netfilter",
	"xfs", "vfat", "efivarfs",
}

// writeInitramfs writes Talos' initramfs: the preinit as /init, Talos' init as
// /init.talos, the rootfs squashfs, the preinit's modules with their index.
func writeInitramfs(ctx context.Context, opts Options, sqsh string) error {
	dir := filepath.Join(opts.Debian, "kernel", "root", "usr", "lib", "modules", opts.KernelVersion)

	ix, err := modules.Open(dir)
	if err != nil {
		return fmt.Errorf("error reading the kernel's modules: %w", err)
	}

	sel, err := kmod.Select(ix, PreinitModules)
	if err != nil {
		return fmt.Errorf("error selecting the preinit's modules: %w", err)
	}

	if len(sel.Unmatched) > 0 {
		return fmt.Errorf("the kernel %s has no modules %v", opts.KernelVersion, sel.Unmatched)
	}

	mods, err := sel.Modules()
	if err != nil {
		return err //nolint:wrapcheck // kmod names the module
	}

	index, err := sel.IndexFiles()
	if err != nil {
		return err //nolint:wrapcheck // kmod names the file
	}

	a := initramfs.New(uint64(opts.MTime.Unix())) //nolint:gosec // a build time, after 1970
	a.Dir("/dev", 0o755)
	a.Dir("/proc", 0o755)
	a.Dir("/sys", 0o755)
	a.CharDev("/dev/console", 0o600, 5, 1)
	a.FileFrom("/init", 0o755, opts.Preinit)
	a.FileFrom("/init.talos", 0o755, filepath.Join(opts.Bins, "init"))
	a.FileFrom("/rootfs.sqsh", 0o644, sqsh)

	base := path.Join("/lib/modules", opts.KernelVersion)

	for _, f := range append(mods, index...) {
		if f.Data == nil {
			a.FileFrom(path.Join(base, f.Name), 0o644, f.Source)
		} else {
			a.File(path.Join(base, f.Name), 0o644, f.Data)
		}
	}

	out, err := os.Create(filepath.Join(opts.Out, InitramfsFile))
	if err != nil {
		return fmt.Errorf("error creating the initramfs: %w", err)
	}

	defer out.Close()

	// The squashfs is compressed already: zstd's fastest level costs little.
	zw, err := initramfs.Compress(out, initramfs.Zstd, 1)
	if err != nil {
		return err //nolint:wrapcheck // names the compression
	}

	if _, err := a.WriteTo(ctx, zw); err != nil {
		return fmt.Errorf("error writing the initramfs: %w", err)
	}

	if err := zw.Close(); err != nil {
		return fmt.Errorf("error compressing the initramfs: %w", err)
	}

	return out.Close() //nolint:wrapcheck // the caller says what was written
}

// squashfs packs dir as Talos packs its rootfs: zstd, every file root's, with the given
// time so that the same tree gives the same image (Debian's squashfs-tools).
func squashfs(ctx context.Context, dir, out string, mtime time.Time) error {
	if _, err := exec.LookPath("mksquashfs"); err != nil {
		return fmt.Errorf("mksquashfs is missing (make setup installs squashfs-tools): %w", err)
	}

	_ = os.Remove(out)

	epoch := strconv.FormatInt(mtime.Unix(), 10)

	cmd := exec.CommandContext(ctx, "mksquashfs", dir, out, "-comp", "zstd", "-all-root", "-noappend",
		"-no-progress", "-quiet", "-mkfs-time", epoch, "-all-time", epoch)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("mksquashfs: %w: %s", err, b)
	}

	return nil
}
