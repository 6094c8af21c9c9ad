package imagecache

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
)

// ErrInvalidKey is wrapped by every error about a malformed key: the asset cannot exist.
var ErrInvalidKey = errors.New("invalid boot asset")

var (
	schematicRe = regexp.MustCompile(`^[0-9a-f]{64}$`)
	versionRe   = regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z][0-9A-Za-z.-]*)?$`)
)

// Archs are the architectures whose boot assets the cache holds.
var Archs = []string{"amd64", "arm64"}

// BootFiles names the Image Factory files of one architecture's boot.
type BootFiles struct {
	Kernel    string
	Initramfs string
	// Cmdline is the metal platform's full kernel cmdline.
	Cmdline string
}

// FilesFor returns the names of arch's boot files: kernel-<arch>, initramfs-<arch>.xz
// and cmdline-metal-<arch>.
func FilesFor(arch string) (BootFiles, error) {
	if !slices.Contains(Archs, arch) {
		return BootFiles{}, fmt.Errorf("%w: architecture %q is not one of amd64, arm64", ErrInvalidKey, arch)
	}

	return BootFiles{Kernel: "kernel-" + arch, Initramfs: "initramfs-" + arch + ".xz", Cmdline: "cmdline-metal-" + arch}, nil
}

// All lists the files, kernel first.
func (f BootFiles) All() []string { return []string{f.Kernel, f.Initramfs, f.Cmdline} }

// Key names one boot asset as the Image Factory serves it:
// /image/<Schematic>/<Version>/<File>.
type Key struct {
	// Schematic is the schematic's ID: 64 lowercase hex digits.
	Schematic string
	// Version is the Talos version, vX.Y.Z with an optional -pre-release.
	Version string
	// File is kernel-<arch>, initramfs-<arch>.xz or cmdline-metal-<arch>, arch amd64 or
	// arm64.
	File string
}

// String is the key as the factory's path below /image/.
func (k Key) String() string { return k.Schematic + "/" + k.Version + "/" + k.File }

// ValidateSchematic refuses what is not a schematic ID: 64 lowercase hex digits.
func ValidateSchematic(id string) error {
	if !schematicRe.MatchString(id) {
		return fmt.Errorf("%w: schematic %q is not 64 lowercase hex digits", ErrInvalidKey, clip(id))
	}

	return nil
}

// Validate refuses a key the factory could not serve, naming the part that is wrong.
func (k Key) Validate() error {
	if err := ValidateSchematic(k.Schematic); err != nil {
		return err
	}

	if !versionRe.MatchString(k.Version) {
		return fmt.Errorf("%w: version %q is not a Talos version like v1.9.0 or v1.10.0-beta.1", ErrInvalidKey, clip(k.Version))
	}

	for _, arch := range Archs {
		files, _ := FilesFor(arch)

		if slices.Contains(files.All(), k.File) {
			return nil
		}
	}

	return fmt.Errorf("%w: file %q is not one of kernel-<arch>, initramfs-<arch>.xz, cmdline-metal-<arch> (arch amd64 or arm64)", ErrInvalidKey, clip(k.File))
}

// clip shortens what a client sent before it goes into an error.
func clip(s string) string {
	const most = 80

	if len(s) > most {
		return s[:most] + "…"
	}

	return s
}
