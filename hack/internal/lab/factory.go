package lab

import (
	"context"
	"crypto/sha256"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/anvil-metal/anvil/hack/internal/diskimage"
	"github.com/anvil-metal/anvil/hack/internal/labnet"
	"github.com/anvil-metal/anvil/internal/labfactory"
	"github.com/anvil-metal/anvil/internal/netns"
	"github.com/anvil-metal/anvil/internal/proc"
)

// FactoryListen is where the lab's Image Factory stand-in listens, in the provider's
// namespace: the provider's --image-factory-base-url default, http://10.77.0.1:8080.
const FactoryListen = labnet.ProviderAddr + ":8080"

// StandinDiskImage is the stand-in's raw disk image in its assets directory, which the
// factory stand-in serves under the same name for the stand-in to "install" itself from.
const StandinDiskImage = labfactory.DiskImage

// factoryTalosDir is where, in the lab's directory, the factory makes real Talos'
// per-schematic files; Down removes it.
const factoryTalosDir = "factory-talos"

// startFactory runs hack/cmd/lab-factory in the provider's namespace and waits until it
// listens (it logs "serving" once its socket is bound). An empty FactoryAssetsDir runs it
// without boot assets.
func (s *State) startFactory(ctx context.Context, cfg Config) error {
	bin, err := filepath.Abs(cfg.FactoryBin)
	if err != nil {
		return fmt.Errorf("error resolving %s: %w", cfg.FactoryBin, err)
	}

	// No assets: a factory of schematics and versions only (what Omni asks), which boots
	// nothing.
	var assets string

	if cfg.FactoryAssetsDir != "" {
		if assets, err = filepath.Abs(cfg.FactoryAssetsDir); err != nil {
			return fmt.Errorf("error resolving %s: %w", cfg.FactoryAssetsDir, err)
		}

		if _, err := os.Stat(filepath.Join(assets, "vmlinuz-amd64")); err != nil {
			return fmt.Errorf("the factory's boot assets are missing (lab.BuildStandinAssets): %w", err)
		}
	}

	_ = os.Remove(s.FactoryLog())

	args := []string{"--listen", FactoryListen, "--assets", assets}

	if cfg.TalosAssetsDir != "" {
		talos, err := filepath.Abs(cfg.TalosAssetsDir)
		if err != nil {
			return fmt.Errorf("error resolving %s: %w", cfg.TalosAssetsDir, err)
		}

		// Per-schematic initramfs and installer layers are made in the lab's directory,
		// removed with it.
		args = append(args, "--talos-assets", talos, "--talos-work", filepath.Join(s.Dir, factoryTalosDir))

		names := slices.Sorted(maps.Keys(cfg.FactoryExtensions))
		for _, name := range names {
			layout, err := filepath.Abs(cfg.FactoryExtensions[name])
			if err != nil {
				return fmt.Errorf("error resolving %s: %w", cfg.FactoryExtensions[name], err)
			}

			args = append(args, "--extension", name+"="+layout)
		}
	} else if len(cfg.FactoryExtensions) > 0 {
		return fmt.Errorf("the factory's extensions are real Talos': they need TalosAssetsDir")
	}

	cmd := netns.Command(context.WithoutCancel(ctx), s.ProviderNS, bin, args...)
	if s.FactoryPID, err = proc.StartDaemon(cmd, s.FactoryLog()); err != nil {
		return fmt.Errorf("error starting the factory stand-in: %w", err)
	}

	if err := s.save(); err != nil {
		return err
	}

	deadline := time.Now().Add(30 * time.Second)

	for {
		if b, err := os.ReadFile(s.FactoryLog()); err == nil && strings.Contains(string(b), "lab-factory: serving") {
			return nil
		}

		if !proc.Alive(s.FactoryPID) {
			return fmt.Errorf("the factory stand-in exited; see %s", s.FactoryLog())
		}

		if time.Now().After(deadline) {
			return fmt.Errorf("the factory stand-in did not come up in 30 s; see %s", s.FactoryLog())
		}

		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// BuildFactory builds hack/cmd/lab-factory to bin, from the module at root.
func BuildFactory(ctx context.Context, root, bin string) error {
	return goBuild(ctx, root, bin, "./hack/cmd/lab-factory")
}

// BuildStandinAssets builds the test "Talos" (hack/cmd/talos-standin) and its boot
// assets into out (vmlinuz-amd64, initramfs-amd64.zst) with the imager, and a raw disk
// booting them (StandinDiskImage) with diskimage, from the module at root, unless out
// has them for this very stand-in binary and kernel already.
func BuildStandinAssets(ctx context.Context, root, out string) error {
	kernel := DebianKernel()
	if kernel == "" {
		return fmt.Errorf("no Debian kernel with its modules (/boot/vmlinuz-<v>, /lib/modules/<v>): make setup installs linux-image-amd64")
	}

	tmp, err := os.MkdirTemp("", "talos-standin-")
	if err != nil {
		return err
	}

	defer os.RemoveAll(tmp)

	// The binary is cheap to build (Go caches it); the initramfs is not, so it is made
	// again only when the binary or the kernel changed.
	bin := filepath.Join(tmp, "talos-standin")
	if err := goBuild(ctx, root, bin, "./hack/cmd/talos-standin"); err != nil {
		return err
	}

	stamp, err := standinStamp(bin, kernel)
	if err != nil {
		return err
	}

	stampFile := filepath.Join(out, "standin.stamp")
	if b, err := os.ReadFile(stampFile); err == nil && string(b) == stamp && StandinAssetsExist(out) {
		return nil
	}

	// Build beside out, then rename: a half-built directory is never taken as built.
	work := out + ".tmp"
	_ = os.RemoveAll(work)

	cmd := exec.CommandContext(ctx, "go", "run", "./imager/cmd/imager", "--agent", bin, "--kernel", kernel, "--out", work, "--zstd-level", "3")
	cmd.Dir = root

	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("error building the stand-in's boot assets: %w: %s", err, b)
	}

	initramfs, err := filepath.Glob(filepath.Join(work, "initramfs-amd64.*"))
	if err != nil || len(initramfs) != 1 {
		return fmt.Errorf("error finding the stand-in's initramfs in %s: want one initramfs-amd64.*, have %v", work, initramfs)
	}

	// The disk the stand-in writes to the machine's disk, as Talos installs itself: it
	// boots the same kernel and initramfs, and InstalledArg tells the stand-in where it
	// booted from. loglevel=7 undoes diskimage's quiet, as the PXE boot is not quiet.
	if err := diskimage.Make(ctx, filepath.Join(work, StandinDiskImage), diskimage.Options{
		Machine:   "talos-standin",
		Kernel:    kernel,
		Initramfs: initramfs[0],
		Format:    diskimage.Raw,
		Cmdline:   labfactory.InstalledArg + " loglevel=7",
	}); err != nil {
		return fmt.Errorf("error building the stand-in's disk image: %w", err)
	}

	if err := os.WriteFile(filepath.Join(work, "standin.stamp"), []byte(stamp), 0o644); err != nil {
		return fmt.Errorf("error writing the stand-in's stamp: %w", err)
	}

	_ = os.RemoveAll(out)

	return os.Rename(work, out)
}

// BuildStandinAssetsARM64 adds the stand-in's arm64 boot assets to out, beside the
// amd64 ones (BuildStandinAssets makes out anew: call it first): vmlinuz-arm64,
// initramfs-arm64.zst and the arm64 disk image, from Debian's arm64 kernel tree at
// kernelRoot (hack/arm64-assets.sh unpacks it, with systemd-boot's arm64 loader),
// unless out has them for this very stand-in binary and kernel already.
func BuildStandinAssetsARM64(ctx context.Context, root, kernelRoot, out string) error {
	kernel, loader, err := ARM64Boot(kernelRoot)
	if err != nil {
		return err
	}

	tmp, err := os.MkdirTemp("", "talos-standin-arm64-")
	if err != nil {
		return err
	}

	defer os.RemoveAll(tmp)

	bin := filepath.Join(tmp, "talos-standin")
	if err := goBuild(ctx, root, bin, "./hack/cmd/talos-standin", "GOARCH=arm64"); err != nil {
		return err
	}

	stamp, err := standinStamp(bin, kernel)
	if err != nil {
		return err
	}

	stampFile := filepath.Join(out, "standin-arm64.stamp")
	if b, err := os.ReadFile(stampFile); err == nil && string(b) == stamp && standinARM64Exist(out) {
		return nil
	}

	// Beside out, so that the files are renamed into it (one file system).
	work := out + ".arm64.tmp"
	_ = os.RemoveAll(work)

	defer os.RemoveAll(work)

	cmd := exec.CommandContext(ctx, "go", "run", "./imager/cmd/imager", "--arch", "arm64", "--agent", bin,
		"--kernel-root", kernelRoot, "--out", work, "--zstd-level", "3")
	cmd.Dir = root

	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("error building the arm64 stand-in's boot assets: %w: %s", err, b)
	}

	if err := diskimage.Make(ctx, filepath.Join(work, labfactory.DiskImageFor("arm64")), diskimage.Options{
		Machine:   "talos-standin",
		Arch:      "arm64",
		Kernel:    kernel,
		Initramfs: filepath.Join(work, "initramfs-arm64.zst"),
		Format:    diskimage.Raw,
		Cmdline:   labfactory.InstalledArg + " loglevel=7",

		SystemdBootARM64: loader,
	}); err != nil {
		return fmt.Errorf("error building the arm64 stand-in's disk image: %w", err)
	}

	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}

	// The stamp last: a half-moved set is never taken as built.
	for _, name := range []string{"vmlinuz-arm64", "initramfs-arm64.zst", labfactory.DiskImageFor("arm64")} {
		if err := os.Rename(filepath.Join(work, name), filepath.Join(out, name)); err != nil {
			return fmt.Errorf("error placing the arm64 stand-in's %s: %w", name, err)
		}
	}

	return os.WriteFile(stampFile, []byte(stamp), 0o644)
}

// ARM64Boot is the arm64 kernel and systemd-boot's arm64 loader in Debian's arm64 tree
// at kernelRoot (hack/arm64-assets.sh unpacks it).
func ARM64Boot(kernelRoot string) (kernel, loader string, err error) {
	kernels, _ := filepath.Glob(filepath.Join(kernelRoot, "boot", "vmlinuz-*-arm64"))
	if len(kernels) != 1 {
		return "", "", fmt.Errorf("want one arm64 kernel in %s/boot (make agent-arm64), have %v", kernelRoot, kernels)
	}

	return kernels[0], filepath.Join(kernelRoot, "usr", "lib", "systemd", "boot", "efi", "systemd-bootaa64.efi"), nil
}

func standinARM64Exist(dir string) bool {
	for _, name := range []string{"vmlinuz-arm64", "initramfs-arm64.zst", labfactory.DiskImageFor("arm64")} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			return false
		}
	}

	return true
}

// standinStamp names what the assets are made of: the stand-in binary's digest and the
// kernel.
func standinStamp(bin, kernel string) (string, error) {
	b, err := os.ReadFile(bin)
	if err != nil {
		return "", fmt.Errorf("error reading the stand-in binary: %w", err)
	}

	sum := sha256.Sum256(b)

	return fmt.Sprintf("%x %s\n", sum, kernel), nil
}

// StandinAssetsExist tells whether dir has the stand-in's kernel, initramfs and disk
// image.
func StandinAssetsExist(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, StandinDiskImage))

	return err == nil && BootAssetsExist(dir)
}

// BootAssetsExist tells whether dir has the imager's kernel and initramfs.
func BootAssetsExist(dir string) bool {
	initramfs, _ := filepath.Glob(filepath.Join(dir, "initramfs-amd64.*"))
	_, err := os.Stat(filepath.Join(dir, "vmlinuz-amd64"))

	return err == nil && len(initramfs) > 0
}

func goBuild(ctx context.Context, root, out, pkg string, env ...string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(append(os.Environ(), "CGO_ENABLED=0"), env...)

	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("error building %s: %w: %s", pkg, err, b)
	}

	return nil
}

// DebianKernel is /boot/vmlinuz-<v> of the newest /lib/modules/<v> that has one (the
// kernel make setup installs), "" when there is none.
func DebianKernel() string {
	dirs, _ := filepath.Glob("/lib/modules/*")
	sort.Sort(sort.Reverse(sort.StringSlice(dirs)))

	for _, d := range dirs {
		k := "/boot/vmlinuz-" + filepath.Base(d)
		if _, err := os.Stat(k); err == nil {
			return k
		}
	}

	return ""
}
