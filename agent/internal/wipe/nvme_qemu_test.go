package wipe_test

import (
	"bufio"
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
)

// TestSecureEraseNVMeQEMU boots Debian's kernel in QEMU with an emulated NVMe drive and
// wipe-disk as init, which formats the namespace with a secure erase; the data written
// on the host before must be gone from the drive's image afterwards.
func TestSecureEraseNVMeQEMU(t *testing.T) {
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
	modDir := filepath.Join("/lib/modules", release)

	mods, err := moduleChain(modDir, "kernel/drivers/nvme/host/nvme.ko")
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
	writeInitramfs(t, initrd, initBin, modDir, mods)

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

func findReport(t *testing.T, log string) wipe.Report {
	t.Helper()

	sc := bufio.NewScanner(strings.NewReader(log))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if rest, ok := strings.CutPrefix(line, "WIPE-REPORT "); ok {
			var r wipe.Report
			require.NoError(t, json.Unmarshal([]byte(rest), &r))

			return r
		}
	}

	t.Fatalf("no report from the guest; serial log:\n%s", log)

	return wipe.Report{}
}

// moduleChain is module and what it depends on, in load order, from modules.dep.
func moduleChain(modDir, module string) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(modDir, "modules.dep"))
	if err != nil {
		return nil, err
	}

	for line := range strings.Lines(string(b)) {
		name, deps, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || name != module {
			continue
		}

		// modules.dep lists what a module needs nearest first: load them from the end.
		chain := strings.Fields(deps)
		for i, j := 0, len(chain)-1; i < j; i, j = i+1, j-1 {
			chain[i], chain[j] = chain[j], chain[i]
		}

		return append(chain, name), nil
	}

	return nil, fmt.Errorf("%s is not in modules.dep", module)
}

func writeInitramfs(t *testing.T, path, initBin, modDir string, mods []string) {
	t.Helper()

	bin, err := os.ReadFile(initBin)
	require.NoError(t, err)

	records := []cpio.Record{
		cpio.Directory("dev", 0o755), cpio.CharDev("dev/console", 0o600, 5, 1),
		cpio.Directory("modules", 0o755), cpio.StaticFile("init", string(bin), 0o755),
	}

	for i, m := range mods {
		if strings.HasSuffix(m, ".ko") {
			content, err := os.ReadFile(filepath.Join(modDir, m))
			require.NoError(t, err)

			records = append(records, cpio.StaticFile(fmt.Sprintf("modules/%02d-%s", i, filepath.Base(m)), string(content), 0o644))
		}
	}

	f, err := os.Create(path)
	require.NoError(t, err)

	w := cpio.Newc.Writer(f)
	require.NoError(t, cpio.WriteRecords(w, records))
	require.NoError(t, cpio.WriteTrailer(w))
	require.NoError(t, f.Close())
}
