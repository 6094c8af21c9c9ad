// Package installerimage composes the installer image Talos installs itself with
// (machine.install.image), without Docker: the base layer the imager builds (Talos'
// installer, grub, xfsprogs, dosfstools and the libraries they load, systemd-boot) and a
// layer with the boot assets it lays down, /usr/install/<arch>/{vmlinuz,initramfs.xz}:
// one base, and boot assets per schematic (its extensions are in the initramfs), as the
// Image Factory's metal-installer/<schematic>:<version> images are.
package installerimage

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Assets are the boot assets an installer lays down, for one architecture: a Unified
// Kernel Image (vmlinuz.efi: kernel, initramfs and command line, which Talos ≥ 1.10's
// installers carry and GRUB installs take apart), or a kernel and an initramfs.
type Assets struct {
	Arch      string
	UKI       string
	Kernel    string
	Initramfs string
}

// files are the assets' files in the layer: Talos' constants.UKIAssetPath,
// KernelAssetPath and InitramfsAssetPath.
func (a Assets) files() []File {
	var files []File

	for name, src := range map[string]string{"vmlinuz.efi": a.UKI, "vmlinuz": a.Kernel, "initramfs.xz": a.Initramfs} {
		if src != "" {
			files = append(files, File{Name: "usr/install/" + a.Arch + "/" + name, Mode: 0o644, Source: src})
		}
	}

	return files
}

// Image is the installer: the base layer at base (an uncompressed tar), then a layer of
// assets written into dir (reused when present: it is named after nothing but what it
// holds, so the caller keys dir by the assets).
func Image(base string, assets Assets, dir string, created time.Time) (v1.Image, error) {
	baseLayer, err := LayerFromFile(base)
	if err != nil {
		return nil, err
	}

	assetsLayer, err := assetsLayer(assets, dir, created)
	if err != nil {
		return nil, err
	}

	img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), baseLayer, assetsLayer)
	if err != nil {
		return nil, fmt.Errorf("error composing the installer image: %w", err)
	}

	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)

	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("error reading the installer image's config: %w", err)
	}

	cfg = cfg.DeepCopy()
	cfg.Architecture, cfg.OS, cfg.Created = assets.Arch, "linux", v1.Time{Time: created}
	cfg.Config.Entrypoint = []string{"/usr/bin/installer"}
	cfg.Config.Env = []string{"PATH=/usr/bin:/usr/sbin:/bin:/sbin", "TARGETARCH=" + assets.Arch}

	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return nil, fmt.Errorf("error setting the installer image's config: %w", err)
	}

	return img, nil
}

// assetsLayer writes the assets' layer into dir once.
func assetsLayer(a Assets, dir string, created time.Time) (v1.Layer, error) {
	path := filepath.Join(dir, "assets-"+a.Arch+".tar")

	if _, err := os.Stat(path); err != nil {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("error making %s: %w", dir, err)
		}

		tmp, err := os.CreateTemp(dir, ".assets-*.tar")
		if err != nil {
			return nil, fmt.Errorf("error writing the installer's assets: %w", err)
		}

		defer os.Remove(tmp.Name())

		err = WriteFiles(tmp, a.files(), created)
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}

		if err != nil {
			return nil, fmt.Errorf("error writing the installer's assets: %w", err)
		}

		if err := os.Rename(tmp.Name(), path); err != nil {
			return nil, fmt.Errorf("error writing the installer's assets: %w", err)
		}
	}

	return LayerFromFile(path)
}
