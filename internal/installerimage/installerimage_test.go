package installerimage

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/go-containerregistry/pkg/v1/validate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// entry is a tar entry as a test compares it.
type entry struct {
	name     string
	typ      byte
	mode     int64
	content  string
	linkname string
}

// readTar lists a layer's entries in order, checking every one is root's, of mtime,
// PAX.
func readTar(t *testing.T, b []byte, mtime time.Time) []entry {
	t.Helper()

	var out []entry

	tr := tar.NewReader(bytes.NewReader(b))

	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}

		require.NoError(t, err)

		data, err := io.ReadAll(tr)
		require.NoError(t, err)

		assert.True(t, h.ModTime.Equal(mtime), "%s's time %s", h.Name, h.ModTime)
		assert.Zero(t, h.Uid, h.Name)
		assert.Zero(t, h.Gid, h.Name)
		assert.Empty(t, h.Uname, h.Name)

		out = append(out, entry{name: h.Name, typ: h.Typeflag, mode: h.Mode, content: string(data), linkname: h.Linkname})
	}
}

// installerTree lays out a small installer tree, as the imager leaves it: made with os's
// calls, Go's mode bits.
func installerTree(t *testing.T) string {
	t.Helper()

	dir := t.TempDir()

	for _, e := range []struct {
		path   string
		mode   fs.FileMode
		data   string
		target string
	}{
		{path: "usr", mode: fs.ModeDir | 0o755},
		{path: "usr/bin", mode: fs.ModeDir | 0o755},
		{path: "usr/bin/installer", mode: 0o755, data: "\x7fELF installer"},
		{path: "usr/bin/imager", target: "installer"},
		{path: "usr/bin/helper", mode: 0o755 | fs.ModeSetuid, data: "\x7fELF helper"},
		{path: "usr/lib", mode: fs.ModeDir | 0o755},
		{path: "usr/lib/grub", mode: fs.ModeDir | 0o750 | fs.ModeSetgid},
		{path: "usr/lib/grub/normal.mod", mode: 0o600, data: "grub"},
		{path: "usr/lib/empty", mode: 0o644},
		{path: "bin", target: "usr/bin"},
		{path: "lib64", target: "/usr/lib"},
		{path: "tmp", mode: fs.ModeDir | 0o777 | fs.ModeSticky},
		{path: "a", mode: fs.ModeDir | 0o755},
		{path: "a/b.txt", mode: 0o644, data: "b"},
		{path: "a.txt", mode: 0o644, data: "a"},
	} {
		p := filepath.Join(dir, e.path)

		switch {
		case e.target != "":
			require.NoError(t, os.Symlink(e.target, p))

			continue
		case e.mode.IsDir():
			require.NoError(t, os.Mkdir(p, 0o700))
		default:
			require.NoError(t, os.WriteFile(p, []byte(e.data), 0o600))
		}

		require.NoError(t, os.Chmod(p, e.mode&^fs.ModeDir))
		require.NoError(t, os.Chtimes(p, time.Now(), time.Now()))
	}

	return dir
}

// TestWriteTree: the layer holds the tree as it is — links as links, modes with their
// setuid, setgid and sticky bits, directories before what they hold — root's, of one
// time, and the same tree gives the same bytes whenever it is written.
func TestWriteTree(t *testing.T) {
	t.Parallel()

	dir := installerTree(t)
	mtime := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

	var first bytes.Buffer

	require.NoError(t, WriteTree(&first, dir, mtime))

	assert.Equal(t, []entry{
		{name: "a/", typ: tar.TypeDir, mode: 0o755},
		{name: "a/b.txt", typ: tar.TypeReg, mode: 0o644, content: "b"},
		{name: "a.txt", typ: tar.TypeReg, mode: 0o644, content: "a"},
		{name: "bin", typ: tar.TypeSymlink, mode: 0o777, linkname: "usr/bin"},
		{name: "lib64", typ: tar.TypeSymlink, mode: 0o777, linkname: "/usr/lib"},
		{name: "tmp/", typ: tar.TypeDir, mode: 0o1777},
		{name: "usr/", typ: tar.TypeDir, mode: 0o755},
		{name: "usr/bin/", typ: tar.TypeDir, mode: 0o755},
		{name: "usr/bin/helper", typ: tar.TypeReg, mode: 0o4755, content: "\x7fELF helper"},
		{name: "usr/bin/imager", typ: tar.TypeSymlink, mode: 0o777, linkname: "installer"},
		{name: "usr/bin/installer", typ: tar.TypeReg, mode: 0o755, content: "\x7fELF installer"},
		{name: "usr/lib/", typ: tar.TypeDir, mode: 0o755},
		{name: "usr/lib/empty", typ: tar.TypeReg, mode: 0o644},
		{name: "usr/lib/grub/", typ: tar.TypeDir, mode: 0o2750},
		{name: "usr/lib/grub/normal.mod", typ: tar.TypeReg, mode: 0o600, content: "grub"},
	}, readTar(t, first.Bytes(), mtime))

	// Written again after the tree's times changed: the same bytes.
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Type()&fs.ModeSymlink != 0 {
			return err
		}

		return os.Chtimes(p, time.Unix(1, 0), time.Unix(1, 0))
	}))

	var second bytes.Buffer

	require.NoError(t, WriteTree(&second, dir, mtime))
	assert.True(t, bytes.Equal(first.Bytes(), second.Bytes()), "two writes of one tree differ")

	// Another time, other bytes of the same entries.
	var other bytes.Buffer

	require.NoError(t, WriteTree(&other, dir, time.Unix(0, 0)))
	assert.Len(t, readTar(t, other.Bytes(), time.Unix(0, 0)), 15)

	assert.Error(t, WriteTree(io.Discard, filepath.Join(dir, "missing"), mtime))
}

// TestWriteFiles: files at their names with their modes, the directories above them
// first, sorted whatever the order given; the same files give the same bytes.
func TestWriteFiles(t *testing.T) {
	t.Parallel()

	src := t.TempDir()
	for name, content := range map[string]string{"uki": "MZ uki", "kernel": "MZ kernel", "initramfs": "zstd"} {
		require.NoError(t, os.WriteFile(filepath.Join(src, name), []byte(content), 0o600))
	}

	mtime := time.Unix(1700000000, 0)
	files := func(order ...int) []File {
		all := []File{
			{Name: "usr/install/amd64/vmlinuz.efi", Mode: 0o644, Source: filepath.Join(src, "uki")},
			{Name: "usr/install/amd64/vmlinuz", Mode: 0o644, Source: filepath.Join(src, "kernel")},
			{Name: "usr/install/amd64/initramfs.xz", Mode: 0o600, Source: filepath.Join(src, "initramfs")},
			{Name: "etc/extra", Mode: 0o755, Source: filepath.Join(src, "kernel")},
		}

		out := make([]File, 0, len(order))
		for _, i := range order {
			out = append(out, all[i])
		}

		return out
	}

	var first, second bytes.Buffer

	require.NoError(t, WriteFiles(&first, files(0, 1, 2, 3), mtime))
	require.NoError(t, WriteFiles(&second, files(3, 2, 1, 0), mtime))
	assert.True(t, bytes.Equal(first.Bytes(), second.Bytes()), "the order given changed the bytes")

	assert.Equal(t, []entry{
		{name: "etc/", typ: tar.TypeDir, mode: 0o755},
		{name: "usr/", typ: tar.TypeDir, mode: 0o755},
		{name: "usr/install/", typ: tar.TypeDir, mode: 0o755},
		{name: "usr/install/amd64/", typ: tar.TypeDir, mode: 0o755},
		{name: "etc/extra", typ: tar.TypeReg, mode: 0o755, content: "MZ kernel"},
		{name: "usr/install/amd64/initramfs.xz", typ: tar.TypeReg, mode: 0o600, content: "zstd"},
		{name: "usr/install/amd64/vmlinuz", typ: tar.TypeReg, mode: 0o644, content: "MZ kernel"},
		{name: "usr/install/amd64/vmlinuz.efi", typ: tar.TypeReg, mode: 0o644, content: "MZ uki"},
	}, readTar(t, first.Bytes(), mtime))

	var empty bytes.Buffer

	require.NoError(t, WriteFiles(&empty, nil, mtime))
	assert.Empty(t, readTar(t, empty.Bytes(), mtime))

	err := WriteFiles(io.Discard, []File{{Name: "x", Mode: 0o644, Source: filepath.Join(src, "missing")}}, mtime)
	assert.ErrorContains(t, err, filepath.Join(src, "missing"))
}

// TestLayerFromFile: a layer tar on disk as it is: its digest and diff ID its content's
// SHA-256, uncompressed OCI, its bytes both ways, its path for a registry to serve.
func TestLayerFromFile(t *testing.T) {
	t.Parallel()

	var b bytes.Buffer

	require.NoError(t, WriteTree(&b, installerTree(t), time.Unix(0, 0)))

	p := filepath.Join(t.TempDir(), "base.tar")
	require.NoError(t, os.WriteFile(p, b.Bytes(), 0o644))

	l, err := LayerFromFile(p)
	require.NoError(t, err)

	sum := sha256.Sum256(b.Bytes())
	want := v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}

	digest, err := l.Digest()
	require.NoError(t, err)
	assert.Equal(t, want, digest)

	diffID, err := l.DiffID()
	require.NoError(t, err)
	assert.Equal(t, want, diffID)

	size, err := l.Size()
	require.NoError(t, err)
	assert.EqualValues(t, b.Len(), size)

	mt, err := l.MediaType()
	require.NoError(t, err)
	assert.Equal(t, types.OCIUncompressedLayer, mt)

	for name, open := range map[string]func() (io.ReadCloser, error){"compressed": l.Compressed, "uncompressed": l.Uncompressed} {
		rc, err := open()
		require.NoError(t, err)

		got, err := io.ReadAll(rc)
		require.NoError(t, err)
		require.NoError(t, rc.Close())
		assert.True(t, bytes.Equal(b.Bytes(), got), name)
	}

	fl, ok := l.(interface{ Path() string })
	require.True(t, ok)
	assert.Equal(t, p, fl.Path())

	_, err = LayerFromFile(filepath.Join(t.TempDir(), "missing.tar"))
	assert.ErrorContains(t, err, "missing.tar")
}

// TestAssetsFiles: the assets' names in the layer, Talos' UKIAssetPath, KernelAssetPath
// and InitramfsAssetPath for the architecture; those not given left out.
func TestAssetsFiles(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name   string
		assets Assets
		want   []File
	}{
		{
			name:   "all",
			assets: Assets{Arch: "amd64", UKI: "/a/uki", Kernel: "/a/kernel", Initramfs: "/a/initramfs"},
			want: []File{
				{Name: "usr/install/amd64/vmlinuz.efi", Mode: 0o644, Source: "/a/uki"},
				{Name: "usr/install/amd64/vmlinuz", Mode: 0o644, Source: "/a/kernel"},
				{Name: "usr/install/amd64/initramfs.xz", Mode: 0o644, Source: "/a/initramfs"},
			},
		},
		{
			name:   "a UKI alone",
			assets: Assets{Arch: "amd64", UKI: "/a/uki"},
			want:   []File{{Name: "usr/install/amd64/vmlinuz.efi", Mode: 0o644, Source: "/a/uki"}},
		},
		{
			name:   "arm64's kernel and initramfs",
			assets: Assets{Arch: "arm64", Kernel: "/a/kernel", Initramfs: "/a/initramfs"},
			want: []File{
				{Name: "usr/install/arm64/vmlinuz", Mode: 0o644, Source: "/a/kernel"},
				{Name: "usr/install/arm64/initramfs.xz", Mode: 0o644, Source: "/a/initramfs"},
			},
		},
		{name: "none", assets: Assets{Arch: "amd64"}},
	} {
		assert.ElementsMatch(t, tc.want, tc.assets.files(), tc.name)
	}
}

// TestImage: the installer image: the base layer, then the assets' layer (made once in
// its directory, reused after), an OCI manifest and config with Talos' installer as the
// entrypoint, PATH and TARGETARCH, the architecture, OS and creation time.
func TestImage(t *testing.T) {
	t.Parallel()

	dir := t.TempDir()

	var base bytes.Buffer

	require.NoError(t, WriteTree(&base, installerTree(t), time.Unix(0, 0)))

	basePath := filepath.Join(dir, "installer-base.tar")
	require.NoError(t, os.WriteFile(basePath, base.Bytes(), 0o644))

	for name, content := range map[string]string{"uki": "MZ uki", "kernel": "MZ kernel", "initramfs": "zstd"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
	}

	created := time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)
	assets := Assets{Arch: "amd64", UKI: filepath.Join(dir, "uki")}
	work := filepath.Join(dir, "work", "schematic")

	img, err := Image(basePath, assets, work, created)
	require.NoError(t, err)
	// Fast: validate reads layers' contents as gzip, and these are uncompressed.
	require.NoError(t, validate.Image(img, validate.Fast))

	mt, err := img.MediaType()
	require.NoError(t, err)
	assert.Equal(t, types.OCIManifestSchema1, mt)

	m, err := img.Manifest()
	require.NoError(t, err)
	assert.Equal(t, types.OCIConfigJSON, m.Config.MediaType)
	require.Len(t, m.Layers, 2)

	baseSum := sha256.Sum256(base.Bytes())
	assert.Equal(t, hex.EncodeToString(baseSum[:]), m.Layers[0].Digest.Hex, "the base layer first")
	assert.Equal(t, types.OCIUncompressedLayer, m.Layers[0].MediaType)
	assert.Equal(t, types.OCIUncompressedLayer, m.Layers[1].MediaType)

	layers, err := img.Layers()
	require.NoError(t, err)

	rc, err := layers[1].Uncompressed()
	require.NoError(t, err)

	assetsTar, err := io.ReadAll(rc)
	require.NoError(t, err)
	require.NoError(t, rc.Close())

	assert.Equal(t, []entry{
		{name: "usr/", typ: tar.TypeDir, mode: 0o755},
		{name: "usr/install/", typ: tar.TypeDir, mode: 0o755},
		{name: "usr/install/amd64/", typ: tar.TypeDir, mode: 0o755},
		{name: "usr/install/amd64/vmlinuz.efi", typ: tar.TypeReg, mode: 0o644, content: "MZ uki"},
	}, readTar(t, assetsTar, created))

	cfg, err := img.ConfigFile()
	require.NoError(t, err)
	assert.Equal(t, "amd64", cfg.Architecture)
	assert.Equal(t, "linux", cfg.OS)
	assert.True(t, cfg.Created.Equal(created), "created %s", cfg.Created)
	assert.Equal(t, []string{"/usr/bin/installer"}, cfg.Config.Entrypoint)
	assert.Equal(t, []string{"PATH=/usr/bin:/usr/sbin:/bin:/sbin", "TARGETARCH=amd64"}, cfg.Config.Env)
	assert.Equal(t, "layers", cfg.RootFS.Type)
	assert.Equal(t, []v1.Hash{m.Layers[0].Digest, m.Layers[1].Digest}, cfg.RootFS.DiffIDs)

	// The assets' layer is a file of its own in work, reused: the same image again, even
	// with the UKI gone.
	layerFile := filepath.Join(work, "assets-amd64.tar")
	st, err := os.Stat(layerFile)
	require.NoError(t, err)

	entries, err := os.ReadDir(work)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "no temporary file left")

	require.NoError(t, os.Remove(assets.UKI))

	again, err := Image(basePath, assets, work, created)
	require.NoError(t, err)

	d1, err := img.Digest()
	require.NoError(t, err)

	d2, err := again.Digest()
	require.NoError(t, err)
	assert.Equal(t, d1, d2)

	st2, err := os.Stat(layerFile)
	require.NoError(t, err)
	assert.True(t, os.SameFile(st, st2), "the layer file was written again")

	// Another architecture, another layer beside it; a source missing is an error.
	_, err = Image(basePath, Assets{Arch: "arm64", Kernel: filepath.Join(dir, "kernel"), Initramfs: filepath.Join(dir, "missing")}, work, created)
	assert.ErrorContains(t, err, "missing")

	_, err = os.Stat(filepath.Join(work, "assets-arm64.tar"))
	assert.ErrorIs(t, err, fs.ErrNotExist, "no layer left of a failed write")

	entries, err = os.ReadDir(work)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "no temporary file left")

	_, err = Image(filepath.Join(dir, "missing-base.tar"), assets, work, created)
	assert.ErrorContains(t, err, "missing-base.tar")
}
