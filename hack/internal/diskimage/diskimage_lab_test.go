//go:build lab

package diskimage

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const (
	ovmfCode = "/usr/share/OVMF/OVMF_CODE_4M.fd"
	ovmfVars = "/usr/share/OVMF/OVMF_VARS_4M.fd"
	deadline = 3 * time.Minute
)

// TestLabBootFromDisk boots one disk, with no network, under SeaBIOS and under
// OVMF, and expects the disk system's line on the serial console and a power-off.
func TestLabBootFromDisk(t *testing.T) {
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Skip("qemu-system-x86_64 is not installed (Debian qemu-system-x86)")
	}
	if _, err := DefaultKernel(); err != nil {
		t.Skipf("no kernel: %v", err)
	}
	for _, tool := range []string{"sfdisk", "mkfs.vfat", "mmd", "mcopy", "syslinux", "qemu-img"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is missing: install fdisk dosfstools mtools syslinux syslinux-common systemd-boot-efi qemu-utils", tool)
		}
	}

	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	disk := filepath.Join(dir, "disk.qcow2")
	const machine = "disk-test-1"
	if err := Make(ctx, disk, Options{Machine: machine, Format: QCOW2, Size: 8 << 30}); err != nil {
		t.Fatal(err)
	}
	t.Logf("built %s in %v", disk, time.Since(start).Round(time.Millisecond))

	for _, fw := range []string{"bios", "uefi"} {
		t.Run(fw, func(t *testing.T) {
			t.Parallel()
			if fw == "uefi" {
				for _, f := range []string{ovmfCode, ovmfVars} {
					if _, err := os.Stat(f); err != nil {
						t.Skipf("OVMF is not installed (Debian ovmf): %v", err)
					}
				}
			}
			bootDisk(t, fw, disk, machine)
		})
	}
}

func bootDisk(t *testing.T, fw, base, machine string) {
	dir := t.TempDir()
	// An overlay per boot: the two boots run at once and QEMU locks its images.
	disk := filepath.Join(dir, "disk.qcow2")
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", base, disk).CombinedOutput(); err != nil {
		t.Fatalf("qemu-img create overlay: %v: %s", err, out)
	}
	serial := filepath.Join(dir, "serial.log")
	args := []string{
		"-accel", "tcg", "-machine", "q35", "-cpu", "max", "-m", "512",
		"-nic", "none", "-boot", "c", "-display", "none", "-no-reboot",
		"-drive", "file=" + disk + ",if=virtio,format=qcow2",
		"-serial", "file:" + serial,
	}
	if fw == "uefi" {
		vars := filepath.Join(dir, "OVMF_VARS.fd")
		if err := copyFile(ovmfVars, vars); err != nil {
			t.Fatal(err)
		}
		args = append(args,
			"-drive", "if=pflash,format=raw,readonly=on,file="+ovmfCode,
			"-drive", "if=pflash,format=raw,file="+vars)
	}

	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, "qemu-system-x86_64", args...)
	var qemuOut strings.Builder
	cmd.Stdout, cmd.Stderr = &qemuOut, &qemuOut
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting qemu: %v", err)
	}
	waitErr := make(chan error, 1)
	go func() { waitErr <- cmd.Wait() }()
	exited := false
	t.Cleanup(func() {
		if !exited {
			_ = cmd.Process.Kill()
			<-waitErr //nolint:errcheck // killed: its exit status says so
		}
	})
	want := Line(machine)
	var seenAt time.Duration
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-waitErr:
			exited = true
			elapsed := time.Since(start)
			log := readLog(serial)
			if seenAt == 0 && strings.Contains(log, want) {
				seenAt = elapsed
			}
			if ctx.Err() != nil {
				t.Fatalf("%s: QEMU still running after %v (line seen: %v)\nqemu: %s\nserial log:\n%s", fw, deadline, seenAt != 0, qemuOut.String(), log)
			}
			if err != nil {
				t.Fatalf("%s: qemu: %v\nqemu: %s\nserial log:\n%s", fw, err, qemuOut.String(), log)
			}
			if seenAt == 0 {
				t.Fatalf("%s: QEMU exited after %v without %q on the serial console\nserial log:\n%s", fw, elapsed.Round(time.Millisecond), want, log)
			}

			t.Logf("%s: %q after %v, powered off after %v", fw, want, seenAt.Round(time.Millisecond), elapsed.Round(time.Millisecond))

			return
		case <-tick.C:
			if seenAt == 0 && strings.Contains(readLog(serial), want) {
				seenAt = time.Since(start)
			}
		}
	}
}

func readLog(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no serial log: %v)", err)
	}

	return string(b)
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()

		return err
	}

	return out.Close()
}
