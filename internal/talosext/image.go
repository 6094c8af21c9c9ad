package talosext

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/siderolabs/talos/pkg/machinery/extensions"
	"go.yaml.in/yaml/v4"
)

// Paths of a system extension image's layer, as Talos loads it (extensions.Load in Talos'
// machinery): its manifest, and the rootfs laid over Talos' /. Nothing else.
const (
	imageManifest = "manifest.yaml"
	imageRootfs   = "rootfs"
)

// maxImageBytes bounds what an extension image's layer unpacks to: firmware extensions
// are the largest, a few hundred MiB.
const maxImageBytes = 2 << 30

// FromLayout reads the system extension image in the OCI image layout dir — make
// agent-extension's _out/agent-extension, or any extension pulled into a layout — as
// Talos loads an extension: its one layer's manifest.yaml as the metadata, and its
// rootfs/ unpacked under dest (which must not exist, or be empty), file modes kept. A
// layout of several images is read for the image of arch.
func FromLayout(dir, dest, arch string) (Extension, error) {
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return Extension{}, fmt.Errorf("error reading the image layout %s: %w", dir, err)
	}

	m, err := idx.IndexManifest()
	if err != nil {
		return Extension{}, fmt.Errorf("error reading the index of %s: %w", dir, err)
	}

	var images []v1.Descriptor

	for _, d := range m.Manifests {
		if d.MediaType.IsImage() && (len(m.Manifests) == 1 || d.Platform == nil || d.Platform.Architecture == arch) {
			images = append(images, d)
		}
	}

	if len(images) != 1 {
		return Extension{}, fmt.Errorf("the image layout %s holds %d images for %s, not one", dir, len(images), arch)
	}

	img, err := idx.Image(images[0].Digest)
	if err != nil {
		return Extension{}, fmt.Errorf("error reading image %s of %s: %w", images[0].Digest, dir, err)
	}

	ext, err := FromImage(img, dest, arch)
	if err != nil {
		return Extension{}, fmt.Errorf("%s: %w", dir, err)
	}

	return ext, nil
}

// FromImage reads a system extension image as FromLayout does: one layer, manifest.yaml
// and rootfs/ only, for arch when its config names one.
func FromImage(img v1.Image, dest, arch string) (Extension, error) {
	cfg, err := img.ConfigFile()
	if err != nil {
		return Extension{}, fmt.Errorf("error reading the image's config: %w", err)
	}

	if cfg.Architecture != "" && arch != "" && cfg.Architecture != arch {
		return Extension{}, fmt.Errorf("the extension is for %s, not %s", cfg.Architecture, arch)
	}

	layers, err := img.Layers()
	if err != nil {
		return Extension{}, fmt.Errorf("error reading the image's layers: %w", err)
	}

	if len(layers) != 1 {
		return Extension{}, fmt.Errorf("a system extension image has one layer, not %d", len(layers))
	}

	rc, err := layers[0].Uncompressed()
	if err != nil {
		return Extension{}, fmt.Errorf("error opening the extension's layer: %w", err)
	}

	defer rc.Close()

	if err := os.MkdirAll(dest, 0o755); err != nil {
		return Extension{}, fmt.Errorf("error making %s: %w", dest, err)
	}

	if entries, err := os.ReadDir(dest); err != nil || len(entries) > 0 {
		return Extension{}, fmt.Errorf("%s is not an empty directory to unpack the extension in", dest)
	}

	root, err := os.OpenRoot(dest)
	if err != nil {
		return Extension{}, fmt.Errorf("error opening %s: %w", dest, err)
	}

	defer root.Close()

	manifest, err := unpack(tar.NewReader(rc), root)
	if err != nil {
		return Extension{}, fmt.Errorf("error unpacking the extension's layer: %w", err)
	}

	var m extensions.Manifest

	if manifest == nil {
		return Extension{}, errors.New("the extension's layer has no manifest.yaml")
	}

	if err := yaml.Unmarshal(manifest, &m); err != nil {
		return Extension{}, fmt.Errorf("error decoding the extension's manifest.yaml: %w", err)
	}

	if m.Version != "v1alpha1" || m.Metadata.Name == "" {
		return Extension{}, fmt.Errorf("the extension's manifest.yaml is not a v1alpha1 manifest naming the extension (version %q, name %q)", m.Version, m.Metadata.Name)
	}

	rootfs := filepath.Join(dest, imageRootfs)
	if st, err := os.Stat(rootfs); err != nil || !st.IsDir() {
		return Extension{}, errors.New("the extension's layer has no rootfs/")
	}

	return Extension{Metadata: m.Metadata, Rootfs: rootfs}, nil
}

// unpack writes the layer's rootfs/ under root and returns its manifest.yaml. Regular
// files, directories and symbolic links only; root keeps every path, a link's target
// included, inside it.
func unpack(tr *tar.Reader, root *os.Root) ([]byte, error) {
	var (
		manifest []byte
		total    int64
	)

	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return manifest, nil
		}

		if err != nil {
			return nil, err //nolint:wrapcheck // the caller says what was read
		}

		name := strings.TrimPrefix(path.Clean("/"+h.Name), "/")
		if name != imageManifest && name != imageRootfs && !strings.HasPrefix(name, imageRootfs+"/") {
			return nil, fmt.Errorf("%s: a system extension holds manifest.yaml and rootfs/ only", h.Name)
		}

		mode := fs.FileMode(h.Mode).Perm() | fs.FileMode(h.Mode)&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky) //nolint:gosec // a tar mode's permission bits

		switch h.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, 0o755); err != nil {
				return nil, err //nolint:wrapcheck // names the path
			}

			if err := root.Chmod(name, mode|0o700); err != nil {
				return nil, err //nolint:wrapcheck // names the path
			}
		case tar.TypeReg:
			if total += h.Size; total > maxImageBytes {
				return nil, fmt.Errorf("the layer unpacks to more than %d bytes", int64(maxImageBytes))
			}

			if name == imageManifest {
				if manifest, err = io.ReadAll(io.LimitReader(tr, 1<<20)); err != nil {
					return nil, err //nolint:wrapcheck // the caller says what was read
				}

				continue
			}

			if err := writeFile(root, name, tr, mode); err != nil {
				return nil, err
			}
		case tar.TypeSymlink:
			if err := root.MkdirAll(path.Dir(name), 0o755); err != nil {
				return nil, err //nolint:wrapcheck // names the path
			}

			if err := root.Symlink(h.Linkname, name); err != nil {
				return nil, err //nolint:wrapcheck // names the path
			}
		default:
			return nil, fmt.Errorf("%s: entries of type %q are not unpacked", h.Name, h.Typeflag)
		}
	}
}

// writeFile writes one regular file under root with its mode.
func writeFile(root *os.Root, name string, r io.Reader, mode fs.FileMode) error {
	if err := root.MkdirAll(path.Dir(name), 0o755); err != nil {
		return err //nolint:wrapcheck // names the path
	}

	f, err := root.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err //nolint:wrapcheck // names the path
	}

	_, err = io.Copy(f, r)

	if cerr := f.Close(); err == nil {
		err = cerr
	}

	if err != nil {
		return fmt.Errorf("error writing %s: %w", name, err)
	}

	return root.Chmod(name, mode) //nolint:wrapcheck // names the path
}
