// Package talosbuild assembles real Talos boot assets for the lab without Docker (make
// talos): Talos' own programs built from its Go module (machined, init, installer) and
// containerd, Debian's kernel and userland (udev, runc, kmod, xfsprogs, dosfstools), laid
// out as Talos' rootfs squashfs in an initramfs, and the base layer of Talos' installer
// image. A Debian kernel has as modules much of what Talos' kernel has built in, so the
// initramfs' /init is a small preinit (hack/cmd/talos-preinit) that loads those modules
// and then runs Talos' init.
//
// Outputs in Options.Out:
//
//	vmlinuz-amd64          the kernel
//	initramfs-amd64.xz     the initramfs (zstd, as Talos' own since 1.8, under the
//	                       factory's name)
//	installer-base.tar     the installer image's base layer (uncompressed)
//	uki-stub-amd64.efi     systemd's UKI stub, os-release: what a UKI is made of
//	os-release
//	talos.json             what went in: versions, packages, digests (Manifest)
package talosbuild

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Options of a build.
type Options struct {
	// TalosVersion is the version of the Talos module the programs were built from.
	TalosVersion string
	// Bins holds machined, init, installer, containerd and containerd-shim-runc-v2.
	Bins string
	// Preinit is the initramfs' /init (hack/cmd/talos-preinit, static).
	Preinit string
	// Debian is hack/talos-debian.sh's output: kernel/root, userland/root,
	// installer/root, versions.txt.
	Debian string
	// TalosSource and MachinerySource are the Talos and machinery module directories
	// (Talos' own files for the rootfs: udev rules, containerd's config, os-release).
	TalosSource, MachinerySource string
	// Out receives the assets.
	Out string
	// MTime of every file in the images.
	MTime time.Time
	// Log receives progress.
	Log io.Writer

	// KernelVersion is read from Debian's versions.txt.
	KernelVersion string
}

// Manifest is talos.json: what the assets were built from, so that a test can prove the
// Talos it booted is the one built here.
type Manifest struct {
	TalosVersion  string            `json:"talosVersion"`
	KernelVersion string            `json:"kernelVersion"`
	Packages      []string          `json:"packages"`
	Files         map[string]string `json:"files"`
}

// Build assembles the assets into opts.Out.
func Build(ctx context.Context, opts Options) (*Manifest, error) {
	if opts.Log == nil {
		opts.Log = io.Discard
	}

	versions, err := os.ReadFile(filepath.Join(opts.Debian, "versions.txt"))
	if err != nil {
		return nil, fmt.Errorf("error reading the Debian packages' versions (hack/talos-debian.sh): %w", err)
	}

	m := &Manifest{TalosVersion: opts.TalosVersion, Files: map[string]string{}}

	for line := range strings.Lines(string(versions)) {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "kernel "); ok {
			opts.KernelVersion = v
		} else if line != "" {
			m.Packages = append(m.Packages, line)
		}
	}

	if opts.KernelVersion == "" {
		return nil, errors.New("no kernel in the Debian packages' versions.txt")
	}

	m.KernelVersion = opts.KernelVersion

	work, err := os.MkdirTemp("", "talos-build-")
	if err != nil {
		return nil, err //nolint:wrapcheck // the temp dir's error names it
	}

	defer os.RemoveAll(work)

	if err := os.MkdirAll(opts.Out, 0o755); err != nil {
		return nil, fmt.Errorf("error making %s: %w", opts.Out, err)
	}

	steps := []struct {
		what string
		do   func() error
	}{
		{"rootfs", func() error { return assembleRootfs(ctx, opts, filepath.Join(work, "rootfs")) }},
		{"squashfs", func() error {
			return squashfs(ctx, filepath.Join(work, "rootfs"), filepath.Join(work, "rootfs.sqsh"), opts.MTime)
		}},
		{"initramfs", func() error { return writeInitramfs(ctx, opts, filepath.Join(work, "rootfs.sqsh")) }},
		{"kernel", func() error {
			return tree{root: opts.Out}.copyFile(
				filepath.Join(opts.Debian, "kernel", "root", "usr", "lib", "modules", opts.KernelVersion, "vmlinuz"), "/"+KernelFile, 0o644)
		}},
		{"installer", func() error { return writeInstallerBase(ctx, opts, filepath.Join(work, "installer")) }},
		// What the factory stand-in makes each schematic's UKI of (the installer's
		// vmlinuz.efi, which GRUB and systemd-boot installs take the kernel, initramfs and
		// command line from): systemd's stub and Talos' os-release.
		{"UKI stub", func() error {
			return tree{root: opts.Out}.copyFile(
				filepath.Join(opts.Debian, "installer", "root", "usr", "lib", "systemd", "boot", "efi", "linuxx64.efi.stub"), "/"+UKIStubFile, 0o644)
		}},
		{"os-release", func() error {
			return tree{root: opts.Out}.copyFile(filepath.Join(opts.MachinerySource, "version", "os-release"), "/"+OSReleaseFile, 0o644)
		}},
	}

	for _, s := range steps {
		start := time.Now()

		if err := s.do(); err != nil {
			return nil, fmt.Errorf("error building the %s: %w", s.what, err)
		}

		fmt.Fprintf(opts.Log, "talos: %s done in %s\n", s.what, time.Since(start).Round(time.Millisecond))
	}

	for _, f := range []string{KernelFile, InitramfsFile, InstallerBaseFile, UKIStubFile, OSReleaseFile} {
		sum, err := fileSum(filepath.Join(opts.Out, f))
		if err != nil {
			return nil, err
		}

		m.Files[f] = sum
	}

	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("error encoding the manifest: %w", err)
	}

	if err := os.WriteFile(filepath.Join(opts.Out, ManifestFile), append(b, '\n'), 0o644); err != nil {
		return nil, fmt.Errorf("error writing the manifest: %w", err)
	}

	return m, nil
}

// The assets' names in Options.Out: the Image Factory's names.
const (
	KernelFile        = "vmlinuz-amd64"
	InitramfsFile     = "initramfs-amd64.xz"
	InstallerBaseFile = "installer-base.tar"
	UKIStubFile       = "uki-stub-amd64.efi"
	OSReleaseFile     = "os-release"
	ManifestFile      = "talos.json"
)

func fileSum(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("error opening %s: %w", path, err)
	}

	defer f.Close()

	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("error reading %s: %w", path, err)
	}

	return hex.EncodeToString(h.Sum(nil)), nil
}

// Key names a build by everything that goes into it: this program (os.Executable: the
// imager's code), Talos' programs and the preinit, the Debian packages' versions, the
// Talos and machinery modules (their directories name their versions). The same key
// gives the same assets, so make talos keeps them in a cache outside the clone under it.
func Key(opts Options) (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("error finding the imager: %w", err)
	}

	h := sha256.New()

	fmt.Fprintf(h, "talos %s\nsource %s\nmachinery %s\n", opts.TalosVersion,
		filepath.Base(opts.TalosSource), filepath.Base(opts.MachinerySource))

	files := []string{self, opts.Preinit, filepath.Join(opts.Debian, "versions.txt")}
	for _, b := range []string{"machined", "init", "installer", "containerd", "containerd-shim-runc-v2"} {
		files = append(files, filepath.Join(opts.Bins, b))
	}

	for _, f := range files {
		sum, err := fileSum(f)
		if err != nil {
			return "", err
		}

		fmt.Fprintf(h, "%s %s\n", filepath.Base(f), sum)
	}

	return hex.EncodeToString(h.Sum(nil))[:16], nil
}
