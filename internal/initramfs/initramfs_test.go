package initramfs_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/u-root/u-root/pkg/cpio"

	"github.com/anvil-metal/anvil/internal/initramfs"
	"github.com/anvil-metal/anvil/internal/initramfs/initramfstest"
)

func TestArchive(t *testing.T) {
	src := filepath.Join(t.TempDir(), "agent")
	require.NoError(t, os.WriteFile(src, []byte("#!agent"), 0o600))

	build := func(mtime uint64) *initramfs.Archive {
		a := initramfs.New(mtime)
		// Added out of order and with leading slashes: the output is sorted and clean.
		a.File("/lib/modules/6.1/modules.dep", 0o644, []byte("a.ko:\n"))
		a.FileFrom("init", 0o755, src)
		a.CharDev("dev/console", 0o600, 5, 1)
		a.Dir("tmp", 0o1777)
		a.Symlink("bin", "/init")

		return a
	}

	for _, tc := range []struct {
		compression initramfs.Compression
		mtime       uint64
	}{
		{initramfs.XZ, 0},
		{initramfs.Zstd, 0},
		{initramfs.Zstd, 1700000000},
	} {
		t.Run(string(tc.compression), func(t *testing.T) {
			compressed := func() []byte {
				var buf bytes.Buffer

				zw, err := initramfs.Compress(&buf, tc.compression, 3)
				require.NoError(t, err)

				_, err = build(tc.mtime).WriteTo(context.Background(), zw)
				require.NoError(t, err)
				require.NoError(t, zw.Close())

				return buf.Bytes()
			}

			first := compressed()
			assert.Equal(t, first, compressed(), "two builds differ")

			if tc.compression == initramfs.XZ {
				// Stream flags: 0x00 0x01 is CRC32; the kernel rejects CRC64 (0x04).
				assert.Equal(t, []byte{0xfd, '7', 'z', 'X', 'Z', 0, 0, 1}, first[:8])
			}

			recs := readBack(t, first, tc.compression)

			var names []string
			for _, r := range recs {
				names = append(names, r.Name)
				assert.Equal(t, tc.mtime, r.MTime, r.Name)
				assert.Zero(t, r.UID+r.GID, r.Name)
				assert.EqualValues(t, 1, r.NLink, r.Name)
			}

			assert.Equal(t, []string{"bin", "dev", "dev/console", "init", "lib", "lib/modules", "lib/modules/6.1", "lib/modules/6.1/modules.dep", "tmp"}, names)

			byName := map[string]cpio.Record{}
			for _, r := range recs {
				byName[r.Name] = r
			}

			assert.EqualValues(t, cpio.S_IFREG|0o755, byName["init"].Mode)
			assert.Equal(t, "#!agent", content(t, byName["init"]))
			assert.EqualValues(t, cpio.S_IFCHR|0o600, byName["dev/console"].Mode)
			assert.EqualValues(t, 5, byName["dev/console"].Rmajor)
			assert.EqualValues(t, 1, byName["dev/console"].Rminor)
			assert.EqualValues(t, cpio.S_IFDIR|0o1777, byName["tmp"].Mode)
			assert.EqualValues(t, cpio.S_IFDIR|0o755, byName["lib/modules"].Mode)
			assert.EqualValues(t, cpio.S_IFLNK|0o777, byName["bin"].Mode)
			assert.Equal(t, "/init", content(t, byName["bin"]))
		})
	}
}

func TestParseCompression(t *testing.T) {
	for in, want := range map[string]initramfs.Compression{"xz": initramfs.XZ, "zstd": initramfs.Zstd, "zst": initramfs.Zstd} {
		got, err := initramfs.ParseCompression(in)
		require.NoError(t, err)
		assert.Equal(t, want, got)
	}

	_, err := initramfs.ParseCompression("gzip")
	assert.Error(t, err)
	assert.Equal(t, "zst", initramfs.Zstd.Ext())
	assert.Equal(t, "xz", initramfs.XZ.Ext())
}

func TestWriteToMissingSource(t *testing.T) {
	a := initramfs.New(0)
	a.FileFrom("init", 0o755, filepath.Join(t.TempDir(), "nope"))

	_, err := a.WriteTo(context.Background(), io.Discard)
	assert.ErrorContains(t, err, "init")
}

// readBack decompresses an archive and returns its records, trailer excluded.
func readBack(t *testing.T, data []byte, c initramfs.Compression) []cpio.Record {
	t.Helper()

	return initramfstest.Records(t, data, c)
}

func content(t *testing.T, r cpio.Record) string {
	t.Helper()

	b, err := io.ReadAll(io.NewSectionReader(r.ReaderAt, 0, int64(r.FileSize)))
	require.NoError(t, err)

	return string(b)
}
