package diskimage

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// needTools skips t unless a kernel and the tools for a raw image are at hand.
func needTools(t *testing.T) {
	t.Helper()
	if _, err := DefaultKernel(); err != nil {
		t.Skipf("no kernel: %v", err)
	}
	for _, tool := range []string{"sfdisk", "mkfs.vfat", "mmd", "mcopy", "mtype", "syslinux"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is missing: install fdisk dosfstools mtools syslinux syslinux-common systemd-boot-efi", tool)
		}
	}
}

// TestLayout checks what both firmware kinds rely on, without booting.
func TestLayout(t *testing.T) {
	needTools(t)
	disk := filepath.Join(t.TempDir(), "disk.raw")
	if err := Make(context.Background(), disk, Options{Machine: "layout-1", Size: 64 << 20}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(disk)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != 64<<20 {
		t.Errorf("size %d, want %d", len(b), 64<<20)
	}
	if b[510] != 0x55 || b[511] != 0xaa {
		t.Errorf("no MBR signature: %x %x", b[510], b[511])
	}
	if p := b[446:462]; p[0] != 0x80 || p[4] != 0xef {
		t.Errorf("partition 1: status %#x type %#x, want 0x80 (active) 0xef (ESP)", p[0], p[4])
	}
	mbr, err := os.ReadFile(MBRBin)
	if err != nil {
		t.Fatal(err)
	}
	if string(b[:len(mbr)]) != string(mbr) {
		t.Error("MBR boot code is not syslinux's mbr.bin")
	}
	img := fmt.Sprintf("%s@@%d", disk, partStart*sector)
	for file, want := range map[string]string{
		"/loader/entries/disk.conf": "options console=tty0 console=ttyS0,115200",
		"/syslinux.cfg":             "KERNEL /vmlinuz",
	} {
		out, err := exec.Command("mtype", "-i", img, "::"+file).CombinedOutput()
		if err != nil || !strings.Contains(string(out), want) {
			t.Errorf("mtype %s: %v: %q, want it to contain %q", file, err, out, want)
		}
	}
	// -a: syslinux marks ldlinux.* hidden and system.
	out, err := exec.Command("mdir", "-i", img, "-a", "-b", "-/", "::/").CombinedOutput()
	if err != nil {
		t.Fatalf("mdir: %v: %s", err, out)
	}
	for _, f := range []string{"::/ldlinux.sys", "::/ldlinux.c32", "::/vmlinuz", "::/initrd.img", "::/EFI/BOOT/BOOTX64.EFI"} {
		if !strings.Contains(strings.ToUpper(string(out)), strings.ToUpper(f)) {
			t.Errorf("%s missing from the FAT:\n%s", f, out)
		}
	}
}

// TestInitramfs: a prebuilt initramfs goes onto the FAT byte for byte, and
// Cmdline comes after the defaults, so loglevel=6 overrides quiet.
func TestInitramfs(t *testing.T) {
	needTools(t)
	dir := t.TempDir()
	// Not a real initramfs: Make must not look inside it.
	want := bytes.Repeat([]byte("\x28\xb5\x2f\xfd not really zstd\n"), 1000)
	initramfs := filepath.Join(dir, "initramfs-amd64.zst")
	if err := os.WriteFile(initramfs, want, 0o644); err != nil {
		t.Fatal(err)
	}
	disk := filepath.Join(dir, "disk.raw")
	opts := Options{Machine: "prebuilt-1", Initramfs: initramfs, Cmdline: "loglevel=6"}
	if err := Make(context.Background(), disk, opts); err != nil {
		t.Fatal(err)
	}
	img := fmt.Sprintf("%s@@%d", disk, partStart*sector)
	got := filepath.Join(dir, "initrd.img")
	if out, err := exec.Command("mcopy", "-n", "-i", img, "::/initrd.img", got).CombinedOutput(); err != nil {
		t.Fatalf("mcopy: %v: %s", err, out)
	}
	if b, err := os.ReadFile(got); err != nil || !bytes.Equal(b, want) {
		t.Errorf("/initrd.img is %d bytes (%v), want the %d of %s", len(b), err, len(want), initramfs)
	}
	out, err := exec.Command("mtype", "-i", img, "::/loader/entries/disk.conf").CombinedOutput()
	if err != nil {
		t.Fatalf("mtype: %v: %s", err, out)
	}
	for _, line := range []string{"title Anvil disk system (prebuilt-1)", "options console=tty0 console=ttyS0,115200 quiet no_timer_check loglevel=6"} {
		if !strings.Contains(string(out), line+"\n") {
			t.Errorf("disk.conf has no line %q:\n%s", line, out)
		}
	}
}

// TestInitramfsOptions: a wrong Initramfs is refused before any tool runs.
func TestInitramfsOptions(t *testing.T) {
	dir := t.TempDir()
	initramfs := filepath.Join(dir, "initramfs-amd64.zst")
	if err := os.WriteFile(initramfs, []byte("initramfs"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		opts Options
		want string
	}{
		"no machine":           {Options{Initramfs: initramfs}, "Options.Machine is empty"},
		"init too":             {Options{Machine: "m", Initramfs: initramfs, Init: initramfs}, "both set"},
		"missing":              {Options{Machine: "m", Initramfs: filepath.Join(dir, "nothing")}, "no such file"},
		"a directory":          {Options{Machine: "m", Initramfs: dir}, "not a regular file"},
		"arm64, no kernel":     {Options{Machine: "m", Initramfs: initramfs, Arch: "arm64", SystemdBootARM64: initramfs}, "needs Options.Kernel"},
		"arm64, no loader":     {Options{Machine: "m", Initramfs: initramfs, Arch: "arm64", Kernel: initramfs}, "SystemdBootARM64"},
		"unknown architecture": {Options{Machine: "m", Initramfs: initramfs, Arch: "riscv64"}, "unknown architecture"},
	} {
		t.Run(name, func(t *testing.T) {
			disk := filepath.Join(dir, "disk.raw")
			err := Make(context.Background(), disk, tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Make: %v, want an error containing %q", err, tc.want)
			}
			if _, err := os.Stat(disk); err == nil {
				t.Error("an image was written")
			}
		})
	}
}

// An arm64 disk: the arm64 loader where AAVMF looks, the arm64 serial console.
func TestARM64(t *testing.T) {
	needTools(t)
	dir := t.TempDir()
	files := map[string]string{"kernel": "ARM64 KERNEL", "initramfs": "INITRAMFS", "loader.efi": "MZ systemd-boot aa64"}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	disk := filepath.Join(dir, "disk.raw")
	opts := Options{
		Machine: "arm-1", Arch: "arm64", Kernel: filepath.Join(dir, "kernel"), Initramfs: filepath.Join(dir, "initramfs"),
		SystemdBootARM64: filepath.Join(dir, "loader.efi"),
	}
	if err := Make(context.Background(), disk, opts); err != nil {
		t.Fatal(err)
	}
	img := fmt.Sprintf("%s@@%d", disk, partStart*sector)
	for file, want := range map[string]string{
		"/EFI/BOOT/BOOTAA64.EFI":    files["loader.efi"],
		"/vmlinuz":                  files["kernel"],
		"/loader/entries/disk.conf": "options console=tty0 console=ttyAMA0,115200 quiet no_timer_check\n",
	} {
		out, err := exec.Command("mtype", "-i", img, "::"+file).CombinedOutput()
		if err != nil || !strings.Contains(string(out), want) {
			t.Errorf("%s: %v: %q, want %q in it", file, err, out, want)
		}
	}
	if out, err := exec.Command("mtype", "-i", img, "::/EFI/BOOT/BOOTX64.EFI").CombinedOutput(); err == nil {
		t.Errorf("an arm64 disk has an x86 loader: %q", out)
	}
}
