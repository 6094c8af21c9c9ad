//go:build lab

package wipe_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/u-root/u-root/pkg/cpio"

	"github.com/anvil-metal/anvil/agent/internal/wipe"
	"github.com/anvil-metal/anvil/internal/modules"
)

// TestLabSecureEraseNVMe boots Debian's kernel in QEMU with an emulated NVMe drive and
// wipe-disk as init, which formats the namespace with a secure erase; the data written
// on the host before must be gone from the drive's image afterwards.
func TestLabSecureEraseNVMe(t *testing.T) {
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		t.Skip("qemu-system-x86_64 is missing (Debian qemu-system-x86)")
	}

	kernels, _ := filepath.Glob("/boot/vmlinuz-*")
	if len(kernels) == 0 {
		t.Skip("no kernel in /boot (Debian linux-image-amd64)")
	}

	kernel := kernels[len(kernels)-1]
	release := strings.TrimPrefix(filepath.Base(kernel), "vmlinuz-")

	index, err := modules.Open(filepath.Join("/lib/modules", release))
	if err != nil {
		t.Skipf("no modules for %s: %v", release, err)
	}

	mods, err := index.Closure("nvme")
	if err != nil {
		t.Skipf("no nvme module for %s: %v", release, err)
	}

	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()

	initBin := filepath.Join(dir, "init")
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", initBin, "./cmd/wipe-disk")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "building wipe-disk: %s", out)

	initrd := filepath.Join(dir, "initrd.cpio")
	writeInitramfs(t, initrd, initBin, mods)

	const size = 64 << 20

	marks := []int64{0, 1 << 20, 16 << 20, size / 2, size - 4096}
	image := markedImage(t, filepath.Join(dir, "nvme.img"), size, marks)

	var serial bytes.Buffer

	cmd := exec.CommandContext(ctx, qemu,
		"-accel", "tcg", "-m", "512", "-smp", "1", "-nodefaults", "-no-reboot",
		"-display", "none", "-serial", "stdio",
		"-kernel", kernel, "-initrd", initrd,
		"-append", "console=ttyS0 rdinit=/init panic=-1 -- -mode secure-erase -wait 2m /dev/nvme0n1",
		"-drive", "file="+image+",if=none,id=nvm,format=raw",
		"-device", "nvme,serial=anvil0001,drive=nvm",
	)
	cmd.Stdout, cmd.Stderr = &serial, &serial

	require.NoError(t, cmd.Start())

	var waitErr error

	exited := make(chan struct{})

	go func() {
		waitErr = cmd.Wait()

		close(exited)
	}()

	// QEMU is killed (through the context) when the test ends before it powers off.
	t.Cleanup(func() {
		cancel()
		<-exited
	})

	select {
	case <-exited:
		err = waitErr
	case <-ctx.Done():
		t.Fatalf("QEMU did not power off in time; serial log:\n%s", serial.String())
	}

	log := serial.String()
	require.NoError(t, err, "QEMU failed; serial log:\n%s", log)

	report := findReport(t, log)
	t.Logf("report: %+v", report)
	assert.Contains(t, report.Method, "NVMe Format NVM")
	assert.Contains(t, report.Verified, "that held data before no longer do")

	for _, off := range marks {
		assert.Equal(t, make([]byte, 4096), readAt(t, image, off, 4096), "data at %d must be gone from the image; serial log:\n%s", off, log)
	}
}

// findReport reads the guest's report off its serial console, where the kernel's log
// put it (after its time stamp).
func findReport(t *testing.T, log string) wipe.Report {
	t.Helper()

	for line := range strings.Lines(log) {
		if _, rest, ok := strings.Cut(strings.TrimSpace(line), "WIPE-REPORT "); ok {
			var r wipe.Report
			require.NoError(t, json.Unmarshal([]byte(rest), &r))

			return r
		}
	}

	t.Fatalf("no report from the guest; serial log:\n%s", log)

	return wipe.Report{}
}

// writeInitramfs writes wipe-disk as /init and mods, decompressed, into /modules, named so
// that name order is load order.
func writeInitramfs(t *testing.T, path, initBin string, mods []modules.Module) {
	t.Helper()

	bin, err := os.ReadFile(initBin)
	require.NoError(t, err)

	records := []cpio.Record{
		cpio.Directory("dev", 0o755), cpio.CharDev("dev/console", 0o600, 5, 1),
		cpio.Directory("modules", 0o755), cpio.StaticFile("init", string(bin), 0o755),
	}

	for i, m := range mods {
		content, err := modules.ReadDecompressed(m.File)
		require.NoError(t, err)

		records = append(records, cpio.StaticFile(fmt.Sprintf("modules/%02d-%s.ko", i, m.Name), string(content), 0o644))
	}

	f, err := os.Create(path)
	require.NoError(t, err)

	w := cpio.Newc.Writer(f)
	require.NoError(t, cpio.WriteRecords(w, records))
	require.NoError(t, cpio.WriteTrailer(w))
	require.NoError(t, f.Close())
}
