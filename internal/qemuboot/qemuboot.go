// Package qemuboot boots the host's Debian kernel in QEMU (TCG) with a tiny initramfs
// whose /init is a Go program and whose /modules are the kernel modules it loads, and
// returns what it printed on its serial console: the tests of code that needs a real
// kernel and a device (NVMe secure erase, NVMe health logs) use it.
package qemuboot

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/u-root/u-root/pkg/cpio"

	"github.com/anvil-metal/anvil/internal/modules"
)

// Machine is a kernel and an initramfs, ready to boot.
type Machine struct {
	QEMU, Kernel, Initramfs string
}

// New builds pkg (a main package) as /init of an initramfs with the kernel modules named
// and their dependencies, in t's temporary directory. It skips t where QEMU, a kernel in
// /boot or its modules are missing.
func New(t testing.TB, ctx context.Context, pkg string, names ...string) Machine {
	t.Helper()

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

	var mods []modules.Module

	seen := map[string]bool{}

	for _, name := range names {
		closure, err := index.Closure(name)
		if err != nil {
			t.Skipf("no %s module for %s: %v", name, release, err)
		}

		for _, m := range closure {
			if !seen[m.Name] {
				seen[m.Name] = true

				mods = append(mods, m)
			}
		}
	}

	dir := t.TempDir()
	initBin := filepath.Join(dir, "init")

	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", initBin, pkg)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "building %s: %s", pkg, out)

	initrd := filepath.Join(dir, "initrd.cpio")
	writeInitramfs(t, initrd, initBin, mods)

	return Machine{QEMU: qemu, Kernel: kernel, Initramfs: initrd}
}

// Run boots the machine with the kernel arguments (after console=ttyS0 rdinit=/init) and
// QEMU's further arguments (its devices), waits for it to power off, and returns its
// serial console. It fails t, printing the console, when QEMU fails or ctx ends first.
func (m Machine) Run(t testing.TB, ctx context.Context, cmdline string, args ...string) string {
	t.Helper()

	ctx, cancel := context.WithCancel(ctx)

	var serial bytes.Buffer

	cmd := exec.CommandContext(ctx, m.QEMU, append([]string{
		"-accel", "tcg", "-m", "512", "-smp", "1", "-nodefaults", "-no-reboot",
		"-display", "none", "-serial", "stdio",
		"-kernel", m.Kernel, "-initrd", m.Initramfs,
		"-append", "console=ttyS0 rdinit=/init panic=-1 " + cmdline,
	}, args...)...)
	cmd.Stdout, cmd.Stderr = &serial, &serial

	require.NoError(t, cmd.Start())

	var waitErr error

	exited := make(chan struct{})

	go func() {
		waitErr = cmd.Wait()

		close(exited)
	}()

	// QEMU is killed (through the context) when the test ends before it powers off.
	defer func() {
		cancel()
		<-exited
	}()

	select {
	case <-exited:
	case <-ctx.Done():
		t.Fatalf("QEMU did not power off in time; serial log:\n%s", serial.String())
	}

	require.NoError(t, waitErr, "QEMU failed; serial log:\n%s", serial.String())

	return serial.String()
}

// Lines are the console's lines that carry tag (after the kernel's time stamp), each
// without it.
func Lines(console, tag string) []string {
	var out []string

	for line := range strings.Lines(console) {
		if _, rest, ok := strings.Cut(strings.TrimSpace(line), tag+" "); ok {
			out = append(out, rest)
		}
	}

	return out
}

// writeInitramfs writes initBin as /init and mods, decompressed, into /modules, named so
// that name order is load order (modules.LoadDir).
func writeInitramfs(t testing.TB, path, initBin string, mods []modules.Module) {
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
