// Package diskimage builds the bootable disk the lab gives each machine before
// a boot that must end "from disk": a tiny Linux system that prints
// "ANVIL-DISK booted from disk machine=<name>" on the serial console and powers
// off. Without it a provider answering "boot from disk" would prove nothing.
//
// One image boots under both firmware kinds: an MBR disk whose only partition
// is an active FAT partition of the EFI System type. SeaBIOS runs syslinux's
// mbr.bin, which chains to syslinux in that partition; OVMF finds
// \EFI\BOOT\BOOTX64.EFI (systemd-boot) on it. Both load the same /vmlinuz and
// /initrd.img with the same command line.
//
// Options.Initramfs puts another system on the same disk layout instead: the
// lab's stand-in Talos writes such a disk to the machine's disk when it
// "installs itself".
//
// Host tools (Debian packages): sfdisk (fdisk), mkfs.vfat (dosfstools), mmd and
// mcopy (mtools), syslinux and mbr.bin (syslinux, syslinux-common),
// systemd-bootx64.efi (systemd-boot-efi), qemu-img (qemu-utils) for qcow2,
// and the go toolchain unless Options.Init names a prebuilt /init or
// Options.Initramfs a whole initramfs.
package diskimage

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"github.com/u-root/u-root/pkg/cpio"
)

// Marker starts the line the disk system prints; Line gives the whole line.
const Marker = "ANVIL-DISK booted from disk"

// Line is what a machine's serial log shows once its disk system booted.
func Line(machine string) string { return Marker + " machine=" + machine }

// InitPackage is the Go package built as the disk system's /init.
const InitPackage = "github.com/anvil-metal/anvil/hack/cmd/disk-system"

// machineFile must match hack/cmd/disk-system's MachineFile.
const machineFile = "etc/anvil-machine"

// Default locations of what Debian packages install.
var (
	MBRBin      = "/usr/lib/syslinux/mbr/mbr.bin"
	SystemdBoot = "/usr/lib/systemd/boot/efi/systemd-bootx64.efi"
)

// Format is the image file's format.
type Format string

const (
	Raw   Format = "raw"
	QCOW2 Format = "qcow2"
)

// Options say what goes on the disk.
type Options struct {
	// Machine is the name the disk system prints and the boot menu's title
	// shows. Required, even with Initramfs (then only the title shows it).
	Machine string
	// Kernel is a bzImage with an EFI stub; empty means the newest /boot/vmlinuz-*.
	Kernel string
	// Init is a static binary built from InitPackage; empty means build it
	// now (needs the go toolchain and the working directory inside the module).
	Init string
	// Initramfs is a prebuilt initramfs (any compression the kernel reads,
	// e.g. zstd) put on the disk as its /initrd.img as it is, instead of one
	// made from Init and Machine; Init must then be empty, as it is not used.
	Initramfs string
	// Format of the file written; empty means Raw.
	Format Format
	// Size is the disk's virtual size in bytes; 0 means just big enough.
	// A bigger disk leaves the rest unpartitioned (zero, sparse).
	Size int64
	// Cmdline is appended to the kernel command line, after the default
	// "console=tty0 console=ttyS0,115200 quiet no_timer_check"; the kernel
	// takes the last of a repeated setting, so "loglevel=6" undoes quiet.
	Cmdline string
	// Arch is the disk's architecture, "" or "amd64", or "arm64": then Kernel and
	// SystemdBootARM64 are required, the disk system (Init) is built for arm64, its
	// console is ttyAMA0, and the EFI loader is \EFI\BOOT\BOOTAA64.EFI (the syslinux
	// boot code stays, unused).
	Arch string
	// SystemdBootARM64 is systemd-bootaa64.efi (from Debian's arm64 systemd-boot-efi,
	// as hack/arm64-assets.sh unpacks it).
	SystemdBootARM64 string
}

const (
	sector    = 512
	partStart = 2048 // sectors: the usual 1 MiB alignment
	mib       = 1 << 20
)

// Make writes a bootable disk image to path.
func Make(ctx context.Context, path string, opts Options) error {
	if opts.Machine == "" {
		return errors.New("diskimage: Options.Machine is empty")
	}
	if strings.ContainsAny(opts.Machine, "\n\r") {
		return fmt.Errorf("diskimage: machine name %q has a line break", opts.Machine)
	}
	if opts.Initramfs != "" {
		if opts.Init != "" {
			return errors.New("diskimage: Options.Init and Options.Initramfs are both set; Init goes into an initramfs of its own")
		}
		st, err := os.Stat(opts.Initramfs)
		if err != nil {
			return fmt.Errorf("diskimage: checking the initramfs: %w", err)
		}
		if !st.Mode().IsRegular() {
			return fmt.Errorf("diskimage: initramfs %s is not a regular file", opts.Initramfs)
		}
	}
	switch opts.Format {
	case "":
		opts.Format = Raw
	case Raw, QCOW2:
	default:
		return fmt.Errorf("diskimage: unknown format %q", opts.Format)
	}
	var err error

	switch opts.Arch {
	case "", "amd64":
		opts.Arch = "amd64"
	case "arm64":
		if opts.Kernel == "" || opts.SystemdBootARM64 == "" {
			return errors.New("diskimage: an arm64 disk needs Options.Kernel and Options.SystemdBootARM64")
		}
	default:
		return fmt.Errorf("diskimage: unknown architecture %q", opts.Arch)
	}

	if opts.Kernel == "" {
		if opts.Kernel, err = DefaultKernel(); err != nil {
			return err
		}
	}

	work, err := os.MkdirTemp(filepath.Dir(path), ".diskimage-")
	if err != nil {
		return fmt.Errorf("diskimage: creating work directory: %w", err)
	}
	defer os.RemoveAll(work)

	initrd := opts.Initramfs
	if initrd == "" {
		if opts.Init == "" {
			opts.Init = filepath.Join(work, "init")
			if err := BuildInitFor(ctx, opts.Init, opts.Arch); err != nil {
				return err
			}
		}
		initrd = filepath.Join(work, "initrd.img")
		if err := writeInitramfs(initrd, opts.Init, opts.Machine); err != nil {
			return err
		}
	}

	files, err := bootFiles(work, opts)
	if err != nil {
		return err
	}
	files = append(files, bootFile{src: initrd, dst: "/initrd.img"})
	files = append(files, bootFile{src: opts.Kernel, dst: "/vmlinuz"})

	var content int64
	for _, f := range files {
		st, err := os.Stat(f.src)
		if err != nil {
			return fmt.Errorf("diskimage: %w", err)
		}
		content += st.Size()
	}
	// Room for FAT tables, syslinux and slack; FAT16 wants at least ~16 MiB.
	partBytes := roundUp(content+content/4+4*mib, mib)
	partBytes = max(partBytes, 32*mib)
	diskBytes := int64(partStart*sector) + partBytes
	if opts.Format == Raw && opts.Size > diskBytes {
		diskBytes = opts.Size
	}

	// Built beside path and renamed into place: a machine never sees half a disk.
	out := filepath.Join(work, "disk.raw")
	if err := writeImage(ctx, out, diskBytes, partBytes, files); err != nil {
		return err
	}
	if opts.Format == QCOW2 {
		qcow := filepath.Join(work, "disk.qcow2")
		if err := run(ctx, "qemu-img", "convert", "-q", "-f", "raw", "-O", "qcow2", out, qcow); err != nil {
			return fmt.Errorf("diskimage: converting to qcow2: %w", err)
		}
		if opts.Size > diskBytes {
			if err := run(ctx, "qemu-img", "resize", "-q", "-f", "qcow2", qcow, fmt.Sprint(opts.Size)); err != nil {
				return fmt.Errorf("diskimage: growing qcow2 to %d bytes: %w", opts.Size, err)
			}
		}
		out = qcow
	}
	if err := os.Rename(out, path); err != nil {
		return fmt.Errorf("diskimage: placing image at %s: %w", path, err)
	}

	return nil
}

type bootFile struct{ src, dst string }

// bootFiles writes the boot loaders' configuration and lists what goes on the
// FAT partition besides the kernel and initramfs.
func bootFiles(work string, opts Options) ([]bootFile, error) {
	// console=ttyS0 last: /dev/console, the init's stdout, is the last console.
	// no_timer_check: the lab's machines are emulated, and on a loaded host the timer
	// interrupt can miss the kernel's IO-APIC timer check, which then panics.
	console, loader, efiName := "ttyS0", SystemdBoot, "/EFI/BOOT/BOOTX64.EFI"
	if opts.Arch == "arm64" {
		console, loader, efiName = "ttyAMA0", opts.SystemdBootARM64, "/EFI/BOOT/BOOTAA64.EFI"
	}

	cmdline := strings.TrimSpace("console=tty0 console=" + console + ",115200 quiet no_timer_check " + opts.Cmdline)
	texts := map[string]string{
		"syslinux.cfg": "SERIAL 0 115200\nDEFAULT disk\nPROMPT 0\nTIMEOUT 0\nLABEL disk\n" +
			"  KERNEL /vmlinuz\n  INITRD /initrd.img\n  APPEND " + cmdline + "\n",
		// timeout 0: boot the default entry at once, no menu.
		"loader.conf": "default disk.conf\ntimeout 0\neditor no\n",
		"disk.conf": "title Anvil disk system (" + opts.Machine + ")\n" +
			"linux /vmlinuz\ninitrd /initrd.img\noptions " + cmdline + "\n",
	}
	for name, text := range texts {
		if err := os.WriteFile(filepath.Join(work, name), []byte(text), 0o644); err != nil {
			return nil, fmt.Errorf("diskimage: writing %s: %w", name, err)
		}
	}

	return []bootFile{
		{filepath.Join(work, "syslinux.cfg"), "/syslinux.cfg"},
		{filepath.Join(work, "loader.conf"), "/loader/loader.conf"},
		{filepath.Join(work, "disk.conf"), "/loader/entries/disk.conf"},
		{loader, efiName},
	}, nil
}

// writeImage lays out the raw disk: MBR boot code and table, FAT, files, syslinux.
func writeImage(ctx context.Context, path string, diskBytes, partBytes int64, files []bootFile) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("diskimage: creating %s: %w", path, err)
	}
	if err := f.Truncate(diskBytes); err != nil {
		f.Close()

		return fmt.Errorf("diskimage: sizing %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("diskimage: closing %s: %w", path, err)
	}

	// type ef: OVMF and the UEFI spec want an ESP; bootable: mbr.bin chains
	// to the active partition.
	table := fmt.Sprintf("label: dos\nstart=%d, size=%d, type=ef, bootable\n", partStart, partBytes/sector)
	if err := runIn(ctx, table, "sfdisk", "--quiet", "--no-reread", "--no-tell-kernel", path); err != nil {
		return fmt.Errorf("diskimage: writing partition table: %w", err)
	}
	mbr, err := os.ReadFile(MBRBin)
	if err != nil {
		return fmt.Errorf("diskimage: reading syslinux MBR: %w", err)
	}
	if len(mbr) > 440 {
		return fmt.Errorf("diskimage: %s is %d bytes, more than the 440 of MBR boot code", MBRBin, len(mbr))
	}
	if err := writeAt(path, mbr, 0); err != nil {
		return fmt.Errorf("diskimage: writing MBR boot code: %w", err)
	}

	// Hidden sectors = partition start: the FAT boot sector (syslinux's) finds
	// itself on the disk by it.
	if err := run(ctx, "mkfs.vfat", "-n", "ANVILDISK", "--offset", fmt.Sprint(partStart),
		"-h", fmt.Sprint(partStart), path, fmt.Sprint(partBytes/1024)); err != nil {
		return fmt.Errorf("diskimage: making FAT filesystem: %w", err)
	}

	img := fmt.Sprintf("%s@@%d", path, partStart*sector)
	dirs := map[string]bool{}
	for _, f := range files {
		for d := filepath.Dir(f.dst); d != "/"; d = filepath.Dir(d) {
			dirs[d] = true
		}
	}
	if len(dirs) > 0 {
		args := []string{"-i", img}
		for _, d := range sortedByDepth(dirs) {
			args = append(args, "::"+d)
		}
		if err := run(ctx, "mmd", args...); err != nil {
			return fmt.Errorf("diskimage: making directories on FAT: %w", err)
		}
	}
	for _, f := range files {
		if err := run(ctx, "mcopy", "-i", img, "-o", f.src, "::"+f.dst); err != nil {
			return fmt.Errorf("diskimage: copying %s to FAT %s: %w", f.src, f.dst, err)
		}
	}
	if err := run(ctx, "syslinux", "--install", "--offset", fmt.Sprint(partStart*sector), path); err != nil {
		return fmt.Errorf("diskimage: installing syslinux: %w", err)
	}

	return nil
}

func sortedByDepth(set map[string]bool) []string {
	var out []string
	for d := range set {
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool {
		di, dj := strings.Count(out[i], "/"), strings.Count(out[j], "/")
		if di != dj {
			return di < dj
		}

		return out[i] < out[j]
	})

	return out
}

// writeInitramfs writes a gzipped newc cpio holding /init, the machine's name
// and /dev/console (the kernel opens it for init's stdio before any devtmpfs).
func writeInitramfs(path, init, machine string) error {
	bin, err := os.ReadFile(init)
	if err != nil {
		return fmt.Errorf("diskimage: reading init: %w", err)
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	w := cpio.Newc.Writer(zw)
	recs := []cpio.Record{
		cpio.Directory("dev", 0o755),
		cpio.CharDev("dev/console", 0o600, 5, 1),
		cpio.CharDev("dev/kmsg", 0o644, 1, 11),
		cpio.Directory("etc", 0o755),
		cpio.StaticFile(machineFile, machine+"\n", 0o644),
		cpio.StaticFile("init", string(bin), 0o755),
	}
	if err := cpio.WriteRecords(w, recs); err != nil {
		return fmt.Errorf("diskimage: writing initramfs: %w", err)
	}
	if err := cpio.WriteTrailer(w); err != nil {
		return fmt.Errorf("diskimage: writing initramfs trailer: %w", err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("diskimage: compressing initramfs: %w", err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("diskimage: writing %s: %w", path, err)
	}

	return nil
}

// BuildInit builds InitPackage as a static binary at out.
func BuildInit(ctx context.Context, out string) error { return BuildInitFor(ctx, out, "amd64") }

// BuildInitFor is BuildInit for an architecture, amd64 or arm64.
func BuildInitFor(ctx context.Context, out, arch string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, InitPackage)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("diskimage: building %s: %w: %s", InitPackage, err, bytes.TrimSpace(b))
	}

	return nil
}

// DefaultKernel is the newest /boot/vmlinuz-* (Debian's linux-image-amd64).
func DefaultKernel() (string, error) {
	m, err := filepath.Glob("/boot/vmlinuz-*")
	if err != nil || len(m) == 0 {
		return "", errors.New("diskimage: no kernel at /boot/vmlinuz-* (install linux-image-amd64)")
	}
	// Versions like 6.1.0-57 sort well enough as strings within one series;
	// the lab installs one kernel.
	sort.Strings(m)

	return m[len(m)-1], nil
}

func roundUp(n, to int64) int64 { return (n + to - 1) / to * to }

func writeAt(path string, b []byte, off int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(b, off); err != nil {
		f.Close()

		return err
	}

	return f.Close()
}

func run(ctx context.Context, name string, args ...string) error {
	return runIn(ctx, "", name, args...)
}

func runIn(ctx context.Context, stdin, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	// mtools refuses a FAT whose geometry looks odd to it unless told not to check.
	cmd.Env = append(os.Environ(), "MTOOLS_SKIP_CHECK=1")
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(b))
	}

	return nil
}
