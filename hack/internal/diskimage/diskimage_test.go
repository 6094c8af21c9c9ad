package diskimage

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestLayout checks what both firmware kinds rely on, without booting.
func TestLayout(t *testing.T) {
	if _, err := DefaultKernel(); err != nil {
		t.Skipf("no kernel: %v", err)
	}
	for _, tool := range []string{"sfdisk", "mkfs.vfat", "mmd", "mcopy", "mtype", "syslinux"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is missing: install fdisk dosfstools mtools syslinux syslinux-common systemd-boot-efi", tool)
		}
	}
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
