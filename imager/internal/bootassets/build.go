// Package bootassets builds the agent's boot-asset bundle, laid out like Talos's:
// vmlinuz-<arch>, initramfs-<arch>.<xz|zst> and cmdline-<arch> in one directory.
package bootassets

import (
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/anvil-metal/anvil/imager/internal/kmod"
	"github.com/anvil-metal/anvil/internal/initramfs"
	"github.com/anvil-metal/anvil/internal/modules"
)

// DefaultCmdline is the agent's kernel command line; the provider appends its anvil.*
// arguments. Serial and VGA consoles so the agent is visible on a BMC's SOL and KVM;
// panic=30 so a crashed agent reboots into PXE rather than hanging.
const DefaultCmdline = "console=tty0 console=ttyS0,115200n8 printk.devkmsg=on panic=30"

// DefaultCmdlineArm64 is DefaultCmdline for arm64, whose serial console is the PL011
// (ttyAMA0, as on QEMU's virt machine and most arm64 servers' SOL).
const DefaultCmdlineArm64 = "console=tty0 console=ttyAMA0,115200n8 printk.devkmsg=on panic=30"

// Cmdline is the default command line for arch.
func Cmdline(arch string) string {
	if arch == "arm64" {
		return DefaultCmdlineArm64
	}

	return DefaultCmdline
}

// Options say what goes into the bundle.
type Options struct {
	// Agent is the metal-agent binary, shipped as /init.
	Agent string
	// Kernel is the kernel image and its modules tree.
	Kernel Kernel
	// FirmwareDir is a tree laid out like /lib/firmware; missing firmware only warns.
	FirmwareDir string
	// Modules are the module name patterns (kmod.Select); their closure is shipped.
	Modules []string
	// OutDir receives the bundle.
	OutDir string
	// Arch names the files: vmlinuz-<Arch>... An arm64 build checks that the kernel is an
	// arm64 Image.
	Arch string
	// UKIStub, when set, is a systemd-boot EFI stub (linuxaa64.efi.stub, linuxx64.efi.stub)
	// for Arch: the kernel, initramfs and cmdline are also bundled into agent-<Arch>.efi, a
	// Unified Kernel Image that UEFI HTTP boot starts directly.
	UKIStub string
	// Compression of the initramfs, and the zstd level (1-22) when zstd.
	Compression initramfs.Compression
	ZstdLevel   int
	// Cmdline is written to cmdline-<Arch>.
	Cmdline string
	// MTime of every archive entry (SOURCE_DATE_EPOCH, or 0).
	MTime uint64
	// Force recompresses even when the archive is unchanged since the last build.
	Force bool
	// Log receives progress lines; nil discards them.
	Log io.Writer
}

// Result tells what was built.
type Result struct {
	Kernel, Initramfs, Cmdline string
	// UKI is agent-<arch>.efi, when Options.UKIStub was set.
	UKI string
	// UKIStub is uki-stub-<arch>.efi, the stub the UKI was built with, when Options.UKIStub
	// was set.
	UKIStub string
	// ArchiveSize is the uncompressed cpio size, InitramfsSize the compressed one.
	ArchiveSize, InitramfsSize int64
	Modules, Firmware          int
	MissingFirmware            []string
	// Cached is true when the initramfs was unchanged and not recompressed.
	Cached bool
}

// Build writes the bundle. Each file is written beside its destination and renamed, so a
// failed build leaves the previous bundle whole.
func Build(ctx context.Context, opts Options) (*Result, error) {
	start := time.Now()
	logf := func(format string, args ...any) {
		if opts.Log != nil {
			fmt.Fprintf(opts.Log, "imager: "+format+"\n", args...)
		}
	}

	if err := os.MkdirAll(opts.OutDir, 0o755); err != nil {
		return nil, fmt.Errorf("error creating %s: %w", opts.OutDir, err)
	}

	if v := ImageVersion(opts.Kernel.Image); v != "" && v != opts.Kernel.Version {
		logf("warning: kernel %s is version %s but the modules tree is %s", opts.Kernel.Image, v, opts.Kernel.Version)
	}

	archive, res, err := Collect(opts, logf)
	if err != nil {
		return nil, err
	}

	var cpioBuf bytes.Buffer

	n, err := archive.WriteTo(ctx, &cpioBuf)
	if err != nil {
		return nil, fmt.Errorf("error writing the cpio archive: %w", err)
	}

	res.ArchiveSize = n
	logf("archive: %d entries, %s uncompressed (%s)", len(archive.Names()), mib(n), since(start))

	if err := CheckKernelArch(opts.Kernel.Image, opts.Arch); err != nil {
		return nil, err
	}

	res.Kernel = filepath.Join(opts.OutDir, "vmlinuz-"+opts.Arch)
	if err := copyFile(opts.Kernel.Image, res.Kernel); err != nil {
		return nil, err
	}

	res.Cmdline = filepath.Join(opts.OutDir, "cmdline-"+opts.Arch)
	if err := writeFile(res.Cmdline, []byte(strings.TrimSpace(opts.Cmdline)+"\n")); err != nil {
		return nil, err
	}

	if err := compress(ctx, opts, cpioBuf.Bytes(), res, logf); err != nil {
		return nil, err
	}

	if opts.UKIStub != "" {
		if err := writeUKI(opts, res); err != nil {
			return nil, err
		}

		logf("uki: %s", res.UKI)
	}

	logf("done in %s: %s, %s (%s), %s", since(start), res.Kernel, res.Initramfs, mib(res.InitramfsSize), res.Cmdline)

	return res, nil
}

// Collect puts together the archive's content: /init, the directories and device nodes
// early userspace needs, the modules closure with its index files, and their firmware.
func Collect(opts Options, logf func(string, ...any)) (*initramfs.Archive, *Result, error) {
	res := &Result{}

	if err := checkAgent(opts.Agent, opts.Arch); err != nil {
		return nil, nil, err
	}

	a := initramfs.New(opts.MTime)
	a.FileFrom("init", 0o755, opts.Agent)

	for _, d := range []string{"dev", "proc", "sys", "run", "etc", "lib/firmware", "lib/modules/" + opts.Kernel.Version} {
		a.Dir(d, 0o755)
	}

	a.Dir("tmp", 0o1777)
	// The kernel opens /dev/console for PID 1's stdio before anything mounts devtmpfs.
	a.CharDev("dev/console", 0o600, 5, 1)
	a.CharDev("dev/null", 0o666, 1, 3)

	ix, err := modules.Open(opts.Kernel.ModulesDir)
	if err != nil {
		return nil, nil, fmt.Errorf("error reading the modules tree: %w", err)
	}

	sel, err := kmod.Select(ix, opts.Modules)
	if err != nil {
		return nil, nil, fmt.Errorf("error selecting modules: %w", err)
	}

	logf("modules: scanned %d in %s, %d patterns → %d modules with dependencies", ix.Len(), opts.Kernel.ModulesDir, len(opts.Modules), len(sel.Names))

	if len(sel.Builtin) > 0 {
		logf("modules: built into the kernel: %s", strings.Join(sel.Builtin, " "))
	}

	if len(sel.Unmatched) > 0 {
		logf("warning: no module matches: %s", strings.Join(sel.Unmatched, " "))
	}

	modFiles, err := sel.Modules()
	if err != nil {
		return nil, nil, fmt.Errorf("error collecting modules: %w", err)
	}

	index, err := sel.IndexFiles()
	if err != nil {
		return nil, nil, fmt.Errorf("error rendering the module index: %w", err)
	}

	modRoot := "lib/modules/" + opts.Kernel.Version
	for _, f := range append(modFiles, index...) {
		add(a, modRoot+"/"+f.Name, f)
	}

	res.Modules = len(modFiles)

	wanted, err := sel.Firmware()
	if err != nil {
		return nil, nil, fmt.Errorf("error reading the modules' firmware: %w", err)
	}

	names := make([]string, 0, len(wanted))
	for name := range wanted {
		names = append(names, name)
	}

	found, missing, err := kmod.FirmwareFiles(opts.FirmwareDir, names)
	if err != nil {
		return nil, nil, err
	}

	for _, f := range found {
		add(a, "lib/firmware/"+f.Name, f)
	}

	res.Firmware, res.MissingFirmware = len(found), missing
	logf("firmware: %d files wanted, %d found in %s, %d missing", len(names), len(found), opts.FirmwareDir, len(missing))

	if len(missing) > 0 {
		var lines []string
		for _, m := range missing {
			lines = append(lines, fmt.Sprintf("%s (%s)", m, strings.Join(wanted[m], ",")))
		}

		logf("warning: missing firmware:\n  %s", strings.Join(lines, "\n  "))
	}

	return a, res, nil
}

// compress writes initramfs-<arch>.<ext>, unless the same archive was compressed the same
// way by the last build: a stamp beside it records the archive's digest and the settings.
func compress(ctx context.Context, opts Options, archive []byte, res *Result, logf func(string, ...any)) error {
	start := time.Now()
	res.Initramfs = filepath.Join(opts.OutDir, "initramfs-"+opts.Arch+"."+opts.Compression.Ext())

	digest := sha256.Sum256(archive)
	stampFile := filepath.Join(opts.OutDir, ".initramfs-"+opts.Arch+".stamp")
	stamp := fmt.Sprintf("%s %s level=%d\n", hex.EncodeToString(digest[:]), opts.Compression, opts.ZstdLevel)

	// Only one initramfs in the bundle: drop one left by a build with another compression.
	for _, c := range []initramfs.Compression{initramfs.XZ, initramfs.Zstd} {
		if c != opts.Compression {
			if err := os.Remove(filepath.Join(opts.OutDir, "initramfs-"+opts.Arch+"."+c.Ext())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("error removing a stale initramfs: %w", err)
			}
		}
	}

	if old, err := os.ReadFile(stampFile); err == nil && string(old) == stamp && !opts.Force {
		if st, err := os.Stat(res.Initramfs); err == nil {
			res.InitramfsSize, res.Cached = st.Size(), true
			logf("initramfs: archive unchanged, kept %s", res.Initramfs)

			return nil
		}
	}

	tmp := res.Initramfs + ".tmp"

	out, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("error creating %s: %w", tmp, err)
	}
	defer os.Remove(tmp)

	zw, err := initramfs.Compress(out, opts.Compression, opts.ZstdLevel)
	if err != nil {
		out.Close()

		return err
	}

	logf("initramfs: compressing %s with %s", mib(int64(len(archive))), opts.Compression)

	if err := copyProgress(ctx, zw, archive, func(done int) {
		logf("initramfs: %s of %s compressed (%s)", mib(int64(done)), mib(int64(len(archive))), since(start))
	}); err != nil {
		out.Close()

		return fmt.Errorf("error compressing the initramfs: %w", err)
	}

	if err := zw.Close(); err != nil {
		out.Close()

		return fmt.Errorf("error compressing the initramfs: %w", err)
	}

	if err := out.Close(); err != nil {
		return fmt.Errorf("error writing %s: %w", tmp, err)
	}

	if err := os.Rename(tmp, res.Initramfs); err != nil {
		return fmt.Errorf("error writing %s: %w", res.Initramfs, err)
	}

	st, err := os.Stat(res.Initramfs)
	if err != nil {
		return fmt.Errorf("error checking %s: %w", res.Initramfs, err)
	}

	res.InitramfsSize = st.Size()
	logf("initramfs: %s → %s with %s in %s", mib(int64(len(archive))), mib(st.Size()), opts.Compression, since(start))

	return writeFile(stampFile, []byte(stamp))
}

// copyProgress writes data in chunks, reporting every few seconds: xz in pure Go runs at
// a few MiB/s, and a silent minute looks like a hang.
func copyProgress(ctx context.Context, w io.Writer, data []byte, report func(done int)) error {
	const chunk = 1 << 20

	last := time.Now()

	for done := 0; done < len(data); {
		if err := ctx.Err(); err != nil {
			return err
		}

		end := min(done+chunk, len(data))
		if _, err := w.Write(data[done:end]); err != nil {
			return err
		}

		done = end

		if time.Since(last) > 5*time.Second {
			report(done)

			last = time.Now()
		}
	}

	return nil
}

// agentMachines are the ELF machines an agent must be built for, by architecture.
var agentMachines = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// checkAgent refuses a dynamically linked agent, or one for another architecture: the
// initramfs has no libc or loader, and the kernel would panic with "No working init found".
func checkAgent(agent, arch string) error {
	f, err := elf.Open(agent)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
			return fmt.Errorf("error reading the agent binary: %w", err)
		}

		// Not ELF (a script?): the kernel will say; nothing more to check here.
		return nil
	}
	defer f.Close()

	if want, ok := agentMachines[arch]; ok && f.Machine != want {
		return fmt.Errorf("agent %s is built for %s, not %s: build it with GOARCH=%s", agent, f.Machine, arch, arch)
	}

	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("agent %s is dynamically linked; build it with CGO_ENABLED=0", agent)
		}
	}

	return nil
}

func add(a *initramfs.Archive, name string, f kmod.File) {
	if f.Data != nil {
		a.File(name, 0o644, f.Data)

		return
	}

	a.FileFrom(name, 0o644, f.Source)
}

func copyFile(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("error reading %s: %w", src, err)
	}

	return writeFile(dst, data)
}

func writeFile(dst string, data []byte) error {
	tmp := dst + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil { //nolint:gosec // the imager's own output paths
		return fmt.Errorf("error writing %s: %w", dst, err)
	}

	if err := os.Rename(tmp, dst); err != nil {
		return fmt.Errorf("error writing %s: %w", dst, err)
	}

	return nil
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

func since(t time.Time) string { return time.Since(t).Round(10 * time.Millisecond).String() }
