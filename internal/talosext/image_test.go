package talosext_test

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/internal/talosext"
)

// entry is one tar entry of a test layer.
type entry struct {
	name, data, link string
	typ              byte
	mode             int64
}

const manifestYAML = `version: v1alpha1
metadata:
  name: metal-agent
  version: v0.1.0
  author: Anvil
  description: test
  compatibility:
    talos:
      version: '>= v1.9.0'
`

// extensionImage is an image of one layer of entries, for arch.
func extensionImage(t *testing.T, arch string, layers ...[]entry) v1.Image {
	t.Helper()

	img := empty.Image

	for _, entries := range layers {
		var buf bytes.Buffer

		tw := tar.NewWriter(&buf)

		for _, e := range entries {
			h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Size: int64(len(e.data)), Linkname: e.link}
			if e.typ != tar.TypeReg {
				h.Size = 0
			}

			require.NoError(t, tw.WriteHeader(h))

			if e.typ == tar.TypeReg {
				_, err := tw.Write([]byte(e.data))
				require.NoError(t, err)
			}
		}

		require.NoError(t, tw.Close())

		b := buf.Bytes()

		layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
		require.NoError(t, err)

		img, err = mutate.AppendLayers(img, layer)
		require.NoError(t, err)
	}

	cfg, err := img.ConfigFile()
	require.NoError(t, err)

	cfg = cfg.DeepCopy()
	cfg.Architecture, cfg.OS = arch, "linux"

	img, err = mutate.ConfigFile(img, cfg)
	require.NoError(t, err)

	return img
}

// agentEntries are the metal agent extension's, as the imager lays them out.
var agentEntries = []entry{
	{name: "manifest.yaml", data: manifestYAML, typ: tar.TypeReg, mode: 0o644},
	{name: "rootfs/", typ: tar.TypeDir, mode: 0o755},
	{name: "rootfs/usr/local/etc/containers/metal-agent.yaml", data: "name: metal-agent\n", typ: tar.TypeReg, mode: 0o644},
	{name: "rootfs/usr/local/etc/is-metal-agent", typ: tar.TypeReg, mode: 0o644},
	{name: "rootfs/usr/local/lib/containers/metal-agent/metal-agent", data: "\x7fELF agent", typ: tar.TypeReg, mode: 0o755},
	{name: "rootfs/usr/local/lib/containers/metal-agent/agent", link: "metal-agent", typ: tar.TypeSymlink, mode: 0o777},
}

// writeLayout writes imgs into a new OCI image layout and returns its directory.
func writeLayout(t *testing.T, imgs ...v1.Image) string {
	t.Helper()

	dir := filepath.Join(t.TempDir(), "layout")

	p, err := layout.Write(dir, empty.Index)
	require.NoError(t, err)

	for _, img := range imgs {
		cfg, err := img.ConfigFile()
		require.NoError(t, err)
		require.NoError(t, p.AppendImage(img, layout.WithPlatform(v1.Platform{OS: "linux", Architecture: cfg.Architecture})))
	}

	return dir
}

// TestFromLayout: an extension image's layout read as Talos loads the extension: its
// manifest's metadata, its rootfs unpacked with the files' modes (the agent stays
// executable) and its links.
func TestFromLayout(t *testing.T) {
	t.Parallel()

	dir := writeLayout(t, extensionImage(t, "amd64", agentEntries))
	dest := filepath.Join(t.TempDir(), "metal-agent")

	ext, err := talosext.FromLayout(dir, dest, "amd64")
	require.NoError(t, err)

	assert.Equal(t, "metal-agent", ext.Metadata.Name)
	assert.Equal(t, "v0.1.0", ext.Metadata.Version)
	assert.Equal(t, ">= v1.9.0", ext.Metadata.Compatibility.Talos.Version)
	assert.Equal(t, filepath.Join(dest, "rootfs"), ext.Rootfs)
	assert.Nil(t, ext.Files)

	agent := filepath.Join(ext.Rootfs, "usr/local/lib/containers/metal-agent/metal-agent")
	st, err := os.Stat(agent)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o755), st.Mode().Perm(), "the agent stays executable")

	b, err := os.ReadFile(agent)
	require.NoError(t, err)
	assert.Equal(t, "\x7fELF agent", string(b))

	flag, err := os.Stat(filepath.Join(ext.Rootfs, "usr/local/etc/is-metal-agent"))
	require.NoError(t, err)
	assert.Zero(t, flag.Size(), "the agent mode's flag file, empty")

	link, err := os.Readlink(filepath.Join(ext.Rootfs, "usr/local/lib/containers/metal-agent/agent"))
	require.NoError(t, err)
	assert.Equal(t, "metal-agent", link)

	_, err = os.Stat(filepath.Join(ext.Rootfs, "manifest.yaml"))
	assert.ErrorIs(t, err, os.ErrNotExist, "the manifest is the extension's metadata, not its rootfs'")

	// Two architectures in one layout: each reads its own.
	arm := agentEntries[:len(agentEntries)-1]
	multi := writeLayout(t, extensionImage(t, "amd64", agentEntries), extensionImage(t, "arm64", arm))

	ext, err = talosext.FromLayout(multi, filepath.Join(t.TempDir(), "x"), "arm64")
	require.NoError(t, err)

	_, err = os.Lstat(filepath.Join(ext.Rootfs, "usr/local/lib/containers/metal-agent/agent"))
	assert.ErrorIs(t, err, os.ErrNotExist, "the arm64 image's rootfs")
}

// TestFromLayoutRefuses: what Talos would not load, or what would write outside dest, is
// refused.
func TestFromLayoutRefuses(t *testing.T) {
	t.Parallel()

	withEntry := func(extra ...entry) []entry { return append(append([]entry{}, agentEntries...), extra...) }

	for _, tc := range []struct {
		name   string
		arch   string
		layers [][]entry
		err    string
	}{
		{name: "another architecture", arch: "arm64", layers: [][]entry{agentEntries}, err: "the extension is for arm64, not amd64"},
		{name: "two layers", arch: "amd64", layers: [][]entry{agentEntries, agentEntries}, err: "one layer, not 2"},
		{name: "no manifest", arch: "amd64", layers: [][]entry{agentEntries[1:]}, err: "has no manifest.yaml"},
		{name: "no rootfs", arch: "amd64", layers: [][]entry{agentEntries[:1]}, err: "has no rootfs/"},
		{name: "a file beside them", arch: "amd64", layers: [][]entry{withEntry(entry{name: "etc/passwd", data: "x", typ: tar.TypeReg, mode: 0o644})}, err: "manifest.yaml and rootfs/ only"},
		{name: "a climb out", arch: "amd64", layers: [][]entry{withEntry(entry{name: "rootfs/../../x", data: "x", typ: tar.TypeReg, mode: 0o644})}, err: "manifest.yaml and rootfs/ only"},
		{
			name: "a link out, written through", arch: "amd64",
			layers: [][]entry{withEntry(
				entry{name: "rootfs/out", link: "/tmp", typ: tar.TypeSymlink, mode: 0o777},
				entry{name: "rootfs/out/x", data: "x", typ: tar.TypeReg, mode: 0o644},
			)},
			err: "escapes",
		},
		{name: "a device", arch: "amd64", layers: [][]entry{withEntry(entry{name: "rootfs/dev/sda", typ: tar.TypeBlock, mode: 0o600})}, err: "are not unpacked"},
		{name: "a bad manifest", arch: "amd64", layers: [][]entry{{{name: "manifest.yaml", data: "version: v2\n", typ: tar.TypeReg, mode: 0o644}, agentEntries[1]}}, err: "not a v1alpha1 manifest"},
	} {
		dir := writeLayout(t, extensionImage(t, tc.arch, tc.layers...))

		_, err := talosext.FromLayout(dir, filepath.Join(t.TempDir(), "x"), "amd64")
		assert.ErrorContains(t, err, tc.err, tc.name)
	}

	// dest must be empty: nothing of another extension is mixed in.
	dest := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dest, "left"), nil, 0o644))

	_, err := talosext.FromLayout(writeLayout(t, extensionImage(t, "amd64", agentEntries)), dest, "amd64")
	assert.ErrorContains(t, err, "is not an empty directory")

	_, err = talosext.FromLayout(t.TempDir(), filepath.Join(t.TempDir(), "x"), "amd64")
	assert.ErrorContains(t, err, "error reading the image layout")
}
