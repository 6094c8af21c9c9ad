package bootassets

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Kernel locates a kernel image and the modules tree built with it.
type Kernel struct {
	// Image is the bzImage, e.g. /boot/vmlinuz-6.1.0-57-amd64.
	Image string
	// ModulesDir is its modules tree, e.g. /lib/modules/6.1.0-57-amd64.
	ModulesDir string
	// Version is the modules tree's name: the initramfs ships it as /lib/modules/<Version>.
	Version string
}

// FindKernel fills in whichever of image and modulesDir is empty, the Debian way:
// /boot/vmlinuz-<v> goes with /lib/modules/<v>. With neither given it takes the newest
// version under root/lib/modules that has both a modules.dep and a root/boot/vmlinuz-<v>.
func FindKernel(root, image, modulesDir string) (Kernel, error) {
	switch {
	case image != "" && modulesDir != "":
	case modulesDir != "":
		image = filepath.Join(root, "boot", "vmlinuz-"+filepath.Base(modulesDir))
	case image != "":
		v, ok := strings.CutPrefix(filepath.Base(image), "vmlinuz-")
		if !ok {
			return Kernel{}, fmt.Errorf("cannot tell the modules tree of kernel %s: give --modules-dir", image)
		}

		modulesDir = filepath.Join(root, "lib", "modules", v)
	default:
		deps, err := filepath.Glob(filepath.Join(root, "lib", "modules", "*", "modules.dep"))
		if err != nil {
			return Kernel{}, fmt.Errorf("error looking for kernels: %w", err)
		}

		var versions []string

		for _, dep := range deps {
			v := filepath.Base(filepath.Dir(dep))
			if _, err := os.Stat(filepath.Join(root, "boot", "vmlinuz-"+v)); err == nil {
				versions = append(versions, v)
			}
		}

		if len(versions) == 0 {
			return Kernel{}, fmt.Errorf("no kernel found in %s (boot/vmlinuz-<v> with lib/modules/<v>/modules.dep): install linux-image-amd64 (make setup), unpack the arm64 one (hack/arm64-assets.sh), or give --kernel and --modules-dir", root)
		}

		sort.Slice(versions, func(i, j int) bool { return versionLess(versions[i], versions[j]) })
		v := versions[len(versions)-1]
		image = filepath.Join(root, "boot", "vmlinuz-"+v)
		modulesDir = filepath.Join(root, "lib", "modules", v)
	}

	for _, p := range []string{image, filepath.Join(modulesDir, "modules.dep")} {
		if _, err := os.Stat(p); err != nil {
			return Kernel{}, fmt.Errorf("error checking the kernel: %w", err)
		}
	}

	return Kernel{Image: image, ModulesDir: modulesDir, Version: filepath.Base(filepath.Clean(modulesDir))}, nil
}

// arm64ImageMagic is "ARM\x64" at offset 0x38 of an arm64 kernel Image header
// (Documentation/arch/arm64/booting.rst); Debian's arm64 vmlinuz is such an Image.
const arm64ImageMagic = "ARM\x64"

// CheckKernelArch refuses a kernel image of the wrong architecture, the mistake an arm64
// build makes by default: the host's /boot holds amd64 kernels. An arm64 build needs an
// arm64 Image; any other build refuses one. Other formats are not told apart.
func CheckKernelArch(image, arch string) error {
	f, err := os.Open(image)
	if err != nil {
		return fmt.Errorf("error reading the kernel: %w", err)
	}
	defer f.Close()

	hdr := make([]byte, 0x3c)
	n, _ := f.ReadAt(hdr, 0)
	isArm64 := n == len(hdr) && string(hdr[0x38:0x3c]) == arm64ImageMagic

	switch {
	case arch == "arm64" && !isArm64:
		return fmt.Errorf("kernel %s is not an arm64 Image: give an arm64 kernel (--kernel, --kernel-root)", image)
	case arch != "arm64" && isArm64:
		return fmt.Errorf("kernel %s is an arm64 Image, not a kernel for %s", image, arch)
	}

	return nil
}

// ImageVersion reads the version string of an x86 bzImage (boot protocol ≥ 2.00:
// "HdrS" at 0x202, a pointer to the string at 0x20e, relative to 0x200). It returns ""
// for anything else; the version only serves to warn when kernel and modules differ.
func ImageVersion(image string) string {
	f, err := os.Open(image)
	if err != nil {
		return ""
	}
	defer f.Close()

	hdr := make([]byte, 0x210)
	if _, err := f.ReadAt(hdr, 0); err != nil || string(hdr[0x202:0x206]) != "HdrS" {
		return ""
	}

	buf := make([]byte, 256)
	if _, err := f.ReadAt(buf, int64(binary.LittleEndian.Uint16(hdr[0x20e:]))+0x200); err != nil {
		return ""
	}

	if i := bytes.IndexByte(buf, 0); i >= 0 {
		buf = buf[:i]
	}

	// "6.1.0-57-amd64 (debian-kernel@lists.debian.org) #1 SMP ..." → "6.1.0-57-amd64".
	v, _, _ := strings.Cut(string(buf), " ")

	return v
}

// versionLess orders "6.1.0-9-amd64" before "6.1.0-57-amd64": digit runs compare as numbers.
func versionLess(a, b string) bool {
	for a != "" && b != "" {
		da, ra := leadingDigits(a)
		db, rb := leadingDigits(b)

		switch {
		case da != "" && db != "":
			if len(da) != len(db) {
				return len(da) < len(db)
			}

			if da != db {
				return da < db
			}

			a, b = ra, rb
		case a[0] != b[0]:
			return a[0] < b[0]
		default:
			a, b = a[1:], b[1:]
		}
	}

	return len(a) < len(b)
}

func leadingDigits(s string) (digits, rest string) {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}

	return strings.TrimLeft(s[:i], "0"), s[i:]
}
