// Package talosext builds what Talos' init reads to layer system extensions over its
// rootfs: an initramfs archive to append to Talos' own (the kernel reads concatenated
// compressed archives) holding /extensions.yaml and one squashfs per extension, as the
// Image Factory's imager appends it. The lab's factory stand-in uses it to bake a
// schematic into real Talos: the "schematic" meta-extension, by which Talos reports
// (ExtensionStatus) and Omni learns the schematic a machine booted, and extensions such
// as Anvil's metal agent.
package talosext

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/extensions"
	"go.yaml.in/yaml/v4"

	"github.com/anvil-metal/anvil/internal/initramfs"
)

// SchematicName is the meta-extension the Image Factory names a schematic by.
const SchematicName = "schematic"

// Extension is one system extension: its manifest's metadata and its rootfs, the files it
// lays over Talos' (paths inside the rootfs, e.g. usr/local/etc/is-metal-agent).
type Extension struct {
	Metadata extensions.Metadata
	// Rootfs is a directory on disk holding the extension's rootfs; or nil Files.
	Rootfs string
	// Files are the rootfs' regular files by path, when Rootfs is "".
	Files map[string][]byte
}

// Schematic is the meta-extension of a schematic, as the Image Factory makes it: named
// "schematic", versioned by the schematic's ID, its document as extra info (Talos reports
// it, Omni reads the schematic's kernel arguments from it), and one empty file
// usr/local/share/schematic/<id>.
func Schematic(id string, doc []byte, factoryURL string) Extension {
	return Extension{
		Metadata: extensions.Metadata{
			Name:        SchematicName,
			Version:     id,
			Author:      "Image Factory (" + factoryURL + ")",
			Description: "Virtual extension which specifies the schematic of the image built with Image Factory.",
			Compatibility: extensions.Compatibility{
				Talos: extensions.Constraint{Version: ">= 1.0.0"},
			},
			ExtraInfo: string(doc),
		},
		Files: map[string][]byte{path.Join("usr/local/share/schematic", id): nil},
	}
}

// Layer writes the archive layering exts, in order, to w: zstd-compressed newc cpio with
// /extensions.yaml and /NNN-<name>.sqsh per extension. The squashfs images are made with
// Debian's mksquashfs (as Talos' imager makes them) in a temporary directory under work.
func Layer(ctx context.Context, w io.Writer, exts []Extension, work string, mtime time.Time) error {
	tmp, err := os.MkdirTemp(work, "talosext-")
	if err != nil {
		return fmt.Errorf("error making a work directory: %w", err)
	}

	defer os.RemoveAll(tmp)

	a := initramfs.New(uint64(max(mtime.Unix(), 0)))
	cfg := extensions.Config{}

	for i, ext := range exts {
		image := fmt.Sprintf("%03d-%s.sqsh", i, ext.Metadata.Name)

		sqsh := filepath.Join(tmp, image)
		if err := squash(ctx, ext, filepath.Join(tmp, strconv.Itoa(i)), sqsh, mtime); err != nil {
			return fmt.Errorf("error packing the extension %s: %w", ext.Metadata.Name, err)
		}

		a.FileFrom("/"+image, 0o644, sqsh)
		cfg.Layers = append(cfg.Layers, &extensions.Layer{Image: image, Metadata: ext.Metadata})
	}

	var doc bytes.Buffer
	if err := yaml.NewEncoder(&doc).Encode(&cfg); err != nil {
		return fmt.Errorf("error encoding extensions.yaml: %w", err)
	}

	a.File("/extensions.yaml", 0o644, doc.Bytes())

	zw, err := initramfs.Compress(w, initramfs.Zstd, 3)
	if err != nil {
		return err //nolint:wrapcheck // names the compression
	}

	if _, err := a.WriteTo(ctx, zw); err != nil {
		return fmt.Errorf("error writing the extensions' archive: %w", err)
	}

	return zw.Close() //nolint:wrapcheck // the caller says what was written
}

// squash makes the extension's rootfs a squashfs at out, laying Files out in dir first.
func squash(ctx context.Context, ext Extension, dir, out string, mtime time.Time) error {
	root := ext.Rootfs
	if root == "" {
		root = dir

		if err := os.MkdirAll(root, 0o755); err != nil {
			return fmt.Errorf("error making %s: %w", root, err)
		}

		for name, data := range ext.Files {
			p := filepath.Join(root, filepath.FromSlash(path.Clean("/"+name)))
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return fmt.Errorf("error making %s's directory: %w", name, err)
			}

			if err := os.WriteFile(p, data, 0o644); err != nil {
				return fmt.Errorf("error writing %s: %w", name, err)
			}
		}
	}

	if _, err := os.Stat(root); err != nil {
		return fmt.Errorf("the extension's rootfs: %w", err)
	}

	epoch := strconv.FormatInt(max(mtime.Unix(), 0), 10)

	cmd := exec.CommandContext(ctx, "mksquashfs", root, out, "-comp", "zstd", "-all-root", "-noappend",
		"-no-progress", "-quiet", "-mkfs-time", epoch, "-all-time", epoch)
	if b, err := cmd.CombinedOutput(); err != nil {
		if _, lerr := exec.LookPath("mksquashfs"); lerr != nil {
			return fmt.Errorf("mksquashfs is missing (make setup installs squashfs-tools): %w", lerr)
		}

		return fmt.Errorf("mksquashfs: %w: %s", err, b)
	}

	return nil
}
