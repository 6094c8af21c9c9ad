package talosext_test

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/extensions"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/u-root/u-root/pkg/cpio"

	"github.com/anvil-metal/anvil/internal/initramfs"
	"github.com/anvil-metal/anvil/internal/initramfs/initramfstest"
	"github.com/anvil-metal/anvil/internal/talosext"
)

const testSchematicID = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"

// TestSchematic: the meta-extension the Image Factory names a schematic by.
func TestSchematic(t *testing.T) {
	t.Parallel()

	doc := []byte("customization:\n  extraKernelArgs:\n    - console=ttyS0\n")
	ext := talosext.Schematic(testSchematicID, doc, "http://factory.lab:8080")

	assert.Equal(t, "schematic", ext.Metadata.Name)
	assert.Equal(t, talosext.SchematicName, ext.Metadata.Name)
	assert.Equal(t, testSchematicID, ext.Metadata.Version)
	assert.Equal(t, string(doc), ext.Metadata.ExtraInfo, "the document, as Omni reads it")
	assert.Contains(t, ext.Metadata.Author, "http://factory.lab:8080")
	assert.NotEmpty(t, ext.Metadata.Description)
	assert.Equal(t, ">= 1.0.0", ext.Metadata.Compatibility.Talos.Version)
	assert.Empty(t, ext.Rootfs)
	assert.Equal(t, map[string][]byte{"usr/local/share/schematic/" + testSchematicID: nil}, ext.Files, "one empty file")
}

func needSquashfs(t *testing.T) {
	t.Helper()

	for _, p := range []string{"mksquashfs", "unsquashfs"} {
		if _, err := exec.LookPath(p); err != nil {
			t.Skipf("%s is missing (make setup installs squashfs-tools): %v", p, err)
		}
	}
}

// TestLayer: the archive appended to Talos' initramfs — zstd newc cpio of
// /extensions.yaml, listing the extensions in order with their metadata, and one squashfs
// per extension named by its place and name, holding its files (from Files or from a
// Rootfs directory); the same extensions give the same bytes.
func TestLayer(t *testing.T) {
	t.Parallel()
	needSquashfs(t)

	rootfs := t.TempDir()
	for name, f := range map[string]struct {
		data string
		mode os.FileMode
	}{
		"usr/local/lib/containers/metal-agent/metal-agent": {"\x7fELF agent", 0o755},
		"usr/local/etc/containers/metal-agent.yaml":        {"name: metal-agent\n", 0o644},
		"usr/local/etc/is-metal-agent":                     {"", 0o644},
	} {
		p := filepath.Join(rootfs, filepath.FromSlash(name))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(f.data), f.mode))
		require.NoError(t, os.Chmod(p, f.mode))
	}

	require.NoError(t, os.Symlink("metal-agent", filepath.Join(rootfs, "usr/local/lib/containers/metal-agent/agent")))

	doc := []byte("customization:\n  systemExtensions:\n    officialExtensions:\n      - metal-agent\n")
	agent := talosext.Extension{
		Metadata: extensions.Metadata{
			Name: "metal-agent", Version: "v0.1.0", Author: "Anvil", Description: "test",
			Compatibility: extensions.Compatibility{Talos: extensions.Constraint{Version: ">= v1.9.0"}},
		},
		Rootfs: rootfs,
	}
	files := talosext.Extension{
		Metadata: extensions.Metadata{Name: "files", Version: "1"},
		Files: map[string][]byte{
			"usr/local/etc/files/a.conf":  []byte("a=1\n"),
			"/usr/local/etc/files/b.conf": []byte("b=2\n"),
			"usr/local/share/empty":       nil,
		},
	}
	exts := []talosext.Extension{talosext.Schematic(testSchematicID, doc, "http://factory.lab"), agent, files}

	work := t.TempDir()
	mtime := time.Unix(1700000000, 0)

	var layer bytes.Buffer

	require.NoError(t, talosext.Layer(t.Context(), &layer, exts, work, mtime))

	left, err := os.ReadDir(work)
	require.NoError(t, err)
	assert.Empty(t, left, "the work directory is left clean")

	recs := readLayer(t, layer.Bytes())

	var names []string

	contents := map[string][]byte{}

	for _, r := range recs {
		names = append(names, r.Name)
		contents[r.Name] = initramfstest.Content(t, r)

		assert.EqualValues(t, 1700000000, r.MTime, r.Name)
		assert.Zero(t, r.UID, r.Name)
	}

	assert.Equal(t, []string{"000-schematic.sqsh", "001-metal-agent.sqsh", "002-files.sqsh", "extensions.yaml"}, names)

	// extensions.yaml as Talos reads it.
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "extensions.yaml"), contents["extensions.yaml"], 0o644))

	var cfg extensions.Config

	require.NoError(t, cfg.Read(filepath.Join(dir, "extensions.yaml")))
	require.Len(t, cfg.Layers, 3)

	for i, want := range []struct {
		image string
		ext   talosext.Extension
	}{{"000-schematic.sqsh", exts[0]}, {"001-metal-agent.sqsh", agent}, {"002-files.sqsh", files}} {
		assert.Equal(t, want.image, cfg.Layers[i].Image)
		assert.Equal(t, want.ext.Metadata, cfg.Layers[i].Metadata, want.image)
	}

	assert.Equal(t, string(doc), cfg.Layers[0].Metadata.ExtraInfo)

	// Each squashfs holds its extension's rootfs.
	for image, want := range map[string]map[string]string{
		"000-schematic.sqsh": {"usr/local/share/schematic/" + testSchematicID: "-rw-r--r-- "},
		"001-metal-agent.sqsh": {
			"usr/local/lib/containers/metal-agent/metal-agent": "-rwxr-xr-x ",
			"usr/local/lib/containers/metal-agent/agent":       "lrwxrwxrwx ",
			"usr/local/etc/containers/metal-agent.yaml":        "-rw-r--r-- ",
			"usr/local/etc/is-metal-agent":                     "-rw-r--r-- ",
		},
		"002-files.sqsh": {
			"usr/local/etc/files/a.conf": "-rw-r--r-- ",
			"usr/local/etc/files/b.conf": "-rw-r--r-- ",
			"usr/local/share/empty":      "-rw-r--r-- ",
		},
	} {
		p := filepath.Join(dir, image)
		require.NoError(t, os.WriteFile(p, contents[image], 0o644))

		listing := unsquashList(t, p)
		var got []string

		for name, mode := range listing {
			if !strings.HasPrefix(mode, "d") {
				got = append(got, name)
			}
		}

		assert.ElementsMatch(t, mapKeys(want), got, image)

		for name, mode := range want {
			assert.True(t, strings.HasPrefix(listing[name], mode+"0/0 "), "%s in %s: %q, root's", name, image, listing[name])
		}
	}

	// The files' content, unpacked.
	out := filepath.Join(dir, "files")
	b, err := exec.CommandContext(t.Context(), "unsquashfs", "-no-progress", "-d", out, filepath.Join(dir, "002-files.sqsh")).CombinedOutput()
	require.NoError(t, err, "%s", b)

	for name, want := range map[string]string{"usr/local/etc/files/a.conf": "a=1\n", "usr/local/etc/files/b.conf": "b=2\n", "usr/local/share/empty": ""} {
		got, err := os.ReadFile(filepath.Join(out, name))
		require.NoError(t, err)
		assert.Equal(t, want, string(got), name)
	}

	// The same extensions, the same bytes.
	var again bytes.Buffer

	require.NoError(t, talosext.Layer(t.Context(), &again, exts, work, mtime))
	assert.True(t, bytes.Equal(layer.Bytes(), again.Bytes()), "two layers of the same extensions differ")
}

// TestLayerErrors: an extension whose rootfs is missing is an error naming it; no
// extensions is an archive of an empty list.
func TestLayerErrors(t *testing.T) {
	t.Parallel()
	needSquashfs(t)

	missing := talosext.Extension{Metadata: extensions.Metadata{Name: "gone"}, Rootfs: filepath.Join(t.TempDir(), "missing")}

	err := talosext.Layer(t.Context(), io.Discard, []talosext.Extension{missing}, t.TempDir(), time.Unix(0, 0))
	assert.ErrorContains(t, err, "error packing the extension gone")

	err = talosext.Layer(t.Context(), io.Discard, nil, filepath.Join(t.TempDir(), "missing"), time.Unix(0, 0))
	assert.ErrorContains(t, err, "work directory")

	var b bytes.Buffer

	require.NoError(t, talosext.Layer(t.Context(), &b, nil, t.TempDir(), time.Unix(0, 0)))

	recs := readLayer(t, b.Bytes())
	require.Len(t, recs, 1)
	assert.Equal(t, "extensions.yaml", recs[0].Name)
	assert.Equal(t, "layers: []\n", string(initramfstest.Content(t, recs[0])))
}

// readLayer decompresses an extension layer and returns its records.
func readLayer(t *testing.T, data []byte) []cpio.Record {
	t.Helper()

	return initramfstest.Records(t, data, initramfs.Zstd)
}

// unsquashList is a squashfs' entries by path (no leading slash), each with its
// unsquashfs -lln line less the path.
func unsquashList(t *testing.T, image string) map[string]string {
	t.Helper()

	out, err := exec.CommandContext(t.Context(), "unsquashfs", "-lln", "-d", "", image).CombinedOutput()
	require.NoError(t, err, "%s", out)

	entries := map[string]string{}

	for line := range strings.Lines(string(out)) {
		line = strings.TrimSpace(line)
		if !strings.Contains(line, " /") {
			continue
		}

		if i := strings.Index(line, " -> "); i >= 0 {
			line = line[:i]
		}

		i := strings.LastIndex(line, " /")
		entries[line[i+2:]] = line[:i+1]
	}

	return entries
}

func mapKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}

	return keys
}
