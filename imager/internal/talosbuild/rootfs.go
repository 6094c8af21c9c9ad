package talosbuild

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"

	"github.com/anvil-metal/anvil/imager/internal/elfdeps"
)

// Debian programs Talos runs, by where Talos runs them (all under /usr/bin, /sbin being a
// link to it): the path in the unpacked userland tree, the name in the rootfs.
var rootfsPrograms = []struct{ from, to string }{
	{"/usr/sbin/runc", "runc"},
	{"/usr/lib/systemd/systemd-udevd", "systemd-udevd"},
	{"/usr/bin/udevadm", "udevadm"},
	{"/usr/bin/kmod", "kmod"},
	{"/usr/sbin/mkfs.xfs", "mkfs.xfs"},
	{"/usr/sbin/xfs_repair", "xfs_repair"},
	{"/usr/sbin/xfs_growfs", "xfs_growfs"},
	{"/usr/sbin/xfs_db", "xfs_db"},
	{"/usr/sbin/mkfs.fat", "mkfs.fat"},
	{"/usr/sbin/fsck.fat", "fsck.fat"},
}

// rootfsLinks are names of programs that are links to others, as Talos' rootfs has them.
var rootfsLinks = map[string]string{
	// machined is multicall: the kernel's orderly poweroff and reboot call these, and
	// apid and trustd run as it.
	"poweroff": "init", "shutdown": "init", "reboot": "init", "dashboard": "init",
	"apid": "init", "trustd": "init",
	"modprobe": "kmod", "insmod": "kmod", "rmmod": "kmod", "lsmod": "kmod", "depmod": "kmod", "modinfo": "kmod",
	"mkfs.vfat": "mkfs.fat", "fsck.vfat": "fsck.fat",
}

// droppedModules are the kernel's module directories and files a lab machine never
// needs: sound, graphics, media, wireless and the like; and the legacy PC devices QEMU
// emulates (floppy, parallel port, PC speaker), KVM and CPU frequency drivers, which
// Talos' kernel does not build and which udev would otherwise spend the lab's emulated
// CPU loading. What is left is what a server boots with.
var droppedModules = []string{
	"drivers/block/floppy.ko.xz", "drivers/parport", "drivers/char/ppdev.ko.xz", "drivers/input/misc/pcspkr.ko.xz",
	"arch/x86/kvm", "drivers/cpufreq", "drivers/edac",
	"sound", "drivers/gpu", "drivers/media", "drivers/infiniband", "drivers/iio", "drivers/staging",
	"drivers/bluetooth", "drivers/net/wireless", "drivers/net/can", "drivers/isdn", "drivers/hwmon",
	"drivers/input/touchscreen", "drivers/input/joystick", "drivers/video", "drivers/comedi",
	"drivers/hid", "drivers/usb/gadget", "drivers/net/usb", "drivers/mtd", "drivers/leds",
	"net/bluetooth", "net/mac80211", "net/wireless", "net/can", "net/nfc",
}

// talosFiles are files of Talos' source module laid into the rootfs as its Dockerfile
// lays them (rootfs-base): source path in the module, path in the rootfs.
var talosFiles = []struct{ from, to string }{
	{"hack/zoneinfo/Etc/UTC", "/usr/share/zoneinfo/Etc/UTC"},
	{"hack/nfsmount.conf", "/etc/nfsmount.conf"},
	{"hack/containerd.toml", "/etc/containerd/config.toml"},
	{"hack/cri-containerd.toml", "/etc/cri/containerd.toml"},
	{"hack/cri-plugin.part", "/etc/cri/conf.d/00-base.part"},
	{"hack/udevd/99-default.link", "/usr/lib/systemd/network/99-default.link"},
	{"hack/udevd/40-vm-hotadd.rules", "/usr/lib/udev/rules.d/40-vm-hotadd.rules"},
	{"hack/udevd/90-selinux.rules", "/usr/lib/udev/rules.d/90-selinux.rules"},
	{"hack/lvm.conf", "/etc/lvm/lvm.conf"},
}

// xfsConfig is the mkfs.xfs configuration Talos formats its partitions with
// (quirks.XFSMkfsConfig); Debian's xfsprogs ships the configuration of the kernel LTS
// before, with the same features for a new kernel.
const (
	xfsConfig       = "/usr/share/xfsprogs/mkfs/lts_6.18.conf"
	xfsConfigDebian = "/usr/share/xfsprogs/mkfs/lts_6.12.conf"
)

// assembleRootfs lays Talos' root filesystem out in dir: the FHS of Talos' pkgs, machined
// as /usr/bin/init, containerd, the Debian programs and the libraries they load, udev's
// rules, the kernel's modules, and Talos' own files.
func assembleRootfs(ctx context.Context, opts Options, dir string) error {
	t := tree{root: dir}
	deb := tree{root: filepath.Join(opts.Debian, "userland", "root")}

	if err := fhs(t); err != nil {
		return err
	}

	for name, src := range map[string]string{
		"init":                    filepath.Join(opts.Bins, "machined"),
		"containerd":              filepath.Join(opts.Bins, "containerd"),
		"containerd-shim-runc-v2": filepath.Join(opts.Bins, "containerd-shim-runc-v2"),
	} {
		if err := t.copyFile(src, "/usr/bin/"+name, 0o755); err != nil {
			return err
		}
	}

	if err := debianPrograms(t, deb); err != nil {
		return err
	}

	for name, target := range rootfsLinks {
		if err := t.symlink(target, "/usr/bin/"+name); err != nil {
			return err
		}
	}

	if err := udev(t, deb); err != nil {
		return err
	}

	if err := kernelModules(ctx, t, opts); err != nil {
		return err
	}

	if err := talosLayout(t, opts); err != nil {
		return err
	}

	// Talos 1.13 formats with lts_6.18.conf; Debian's newest is 6.12's.
	return t.copyFile(deb.host(xfsConfigDebian), xfsConfig, 0o644)
}

// fhs is siderolabs/pkgs' fhs: merged /usr, /bin and /sbin in /usr/bin, /lib and /lib64
// in /usr/lib.
func fhs(t tree) error {
	if err := t.mkdir(0o755, "/dev", "/proc", "/sys", "/etc", "/opt", "/run/lock", "/usr/bin", "/usr/lib",
		"/usr/var", "/usr/include", "/usr/src", "/var/log", "/var/mail", "/var/spool"); err != nil {
		return err
	}

	if err := t.mkdir(0o750, "/root"); err != nil {
		return err
	}

	// fs.ModeSticky, not 0o1000: os.Chmod keeps only Go's mode bits.
	if err := t.mkdir(0o777|fs.ModeSticky, "/tmp", "/var/tmp"); err != nil {
		return err
	}

	for _, l := range [][2]string{
		{"usr/lib", "/lib64"}, {"usr/lib", "/lib"}, {"usr/bin", "/bin"}, {"usr/bin", "/sbin"},
		{"lib", "/usr/lib64"}, {"bin", "/usr/sbin"}, {"../run", "/var/run"}, {"../run/lock", "/var/lock"},
	} {
		if err := t.symlink(l[0], l[1]); err != nil {
			return err
		}
	}

	return nil
}

// debianPrograms copies the Debian programs and every library they load (ELF needs,
// dlopen notes), and the dynamic loader where /lib64 expects it.
func debianPrograms(t, deb tree) error {
	froms := make([]string, 0, len(rootfsPrograms))
	for _, p := range rootfsPrograms {
		froms = append(froms, p.from)
	}

	files, err := elfdeps.Closure(deb.root, froms, nil)
	if err != nil {
		return fmt.Errorf("error finding what the Debian programs load: %w", err)
	}

	for _, f := range files {
		if slices.Contains(froms, f) {
			continue // the programs themselves go to /usr/bin below
		}

		if err := t.copyFrom(deb, f); err != nil {
			return err
		}
	}

	for _, p := range rootfsPrograms {
		if err := t.copyFile(deb.host(p.from), "/usr/bin/"+p.to, 0o755); err != nil {
			return err
		}
	}

	return nil
}

// udev copies udev's rules, hardware database sources and helper programs.
func udev(t, deb tree) error {
	for _, d := range []string{"/usr/lib/udev/rules.d", "/usr/lib/udev/hwdb.d"} {
		if err := t.copyFrom(deb, d); err != nil {
			return err
		}
	}

	entries, err := os.ReadDir(deb.host("/usr/lib/udev"))
	if err != nil {
		return fmt.Errorf("error reading udev's helpers: %w", err)
	}

	var helpers []string

	for _, e := range entries {
		info, err := e.Info()
		if err == nil && info.Mode().IsRegular() && info.Mode().Perm()&0o111 != 0 {
			helpers = append(helpers, path.Join("/usr/lib/udev", e.Name()))
		}
	}

	libs, err := elfdeps.Closure(deb.root, helpers, nil)
	if err != nil {
		return fmt.Errorf("error finding what udev's helpers load: %w", err)
	}

	for _, f := range libs {
		if err := t.copyFrom(deb, f); err != nil {
			return err
		}
	}

	return nil
}

// kernelModules copies the kernel's modules, less what a server never loads, and indexes
// what is left (depmod), so that udev and modprobe find them.
func kernelModules(ctx context.Context, t tree, opts Options) error {
	kernel := tree{root: filepath.Join(opts.Debian, "kernel", "root")}
	modules := path.Join("/usr/lib/modules", opts.KernelVersion)

	if err := t.copyFrom(kernel, modules); err != nil {
		return err
	}

	for _, d := range droppedModules {
		if err := os.RemoveAll(t.host(path.Join(modules, "kernel", d))); err != nil {
			return fmt.Errorf("error dropping the modules in %s: %w", d, err)
		}
	}

	for _, f := range []string{"vmlinuz", "System.map", "config"} {
		if err := os.Remove(t.host(path.Join(modules, f))); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("error dropping %s: %w", f, err)
		}
	}

	out, err := exec.CommandContext(ctx, "depmod", "-b", t.host("/usr"), opts.KernelVersion).CombinedOutput()
	if err != nil {
		return fmt.Errorf("error indexing the modules (depmod): %w: %s", err, out)
	}

	return nil
}

// talosLayout is what Talos' Dockerfile makes of the rootfs after its packages: its
// directories, files, empty files and links.
func talosLayout(t tree, opts Options) error {
	if err := t.mkdir(0o755,
		"/boot/EFI", "/etc/iscsi", "/etc/nvme", "/etc/cri/conf.d/hosts", "/usr/lib/firmware", "/usr/etc",
		"/usr/local/share", "/usr/share/zoneinfo/Etc", "/mnt", "/system", "/opt", "/.extra",
		"/etc/kubernetes/manifests", "/etc/cni/net.d", "/etc/ssl/certs", "/usr/libexec/kubernetes",
		"/usr/local/lib/kubelet/credentialproviders", "/etc/selinux/targeted/contexts/files",
		"/opt/containerd/bin", "/opt/containerd/lib", "/etc/containerd", "/etc/lvm",
		// Talos' SBOM controller reads it; empty: no SBOM here.
		"/usr/share/spdx",
	); err != nil {
		return err
	}

	src := tree{root: opts.TalosSource}

	for _, f := range talosFiles {
		if err := t.copyFile(src.host(f.from), f.to, 0o644); err != nil {
			return err
		}
	}

	if err := t.copyFile(filepath.Join(opts.MachinerySource, "version", "os-release"), "/etc/os-release", 0o644); err != nil {
		return err
	}

	if err := t.touch("/etc/extensions.yaml", "/etc/resolv.conf", "/etc/hosts", "/etc/machine-id",
		"/etc/cri/conf.d/cri.toml", "/etc/cri/conf.d/01-registries.part", "/etc/cri/conf.d/20-customization.part",
		"/etc/cri/conf.d/base-spec.json", "/etc/ssl/certs/ca-certificates.crt",
		"/etc/selinux/targeted/contexts/files/file_contexts", "/etc/iscsi/initiatorname.iscsi",
		"/etc/nvme/hostid", "/etc/nvme/hostnqn"); err != nil {
		return err
	}

	for _, l := range [][2]string{
		{"/usr/share/zoneinfo/Etc/UTC", "/etc/localtime"},
		{"ca-certificates.crt", "/etc/ssl/certs/ca-certificates"},
		{"/etc/ssl", "/etc/pki"},
		{"/etc/ssl", "/usr/share/ca-certificates"},
		{"/etc/ssl", "/usr/local/share/ca-certificates"},
		{"/etc/ssl", "/etc/ca-certificates"},
	} {
		if err := t.symlink(l[0], l[1]); err != nil {
			return err
		}
	}

	return nil
}
