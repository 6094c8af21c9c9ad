package modules

import (
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/ulikunitz/xz"
)

func TestReadDecompressed(t *testing.T) {
	t.Parallel()

	content := []byte("\x7fELF a module, or a firmware blob")

	compress := map[string]func(t *testing.T) []byte{
		"": func(*testing.T) []byte { return content },
		".xz": func(t *testing.T) []byte {
			var b bytes.Buffer
			w, err := xz.NewWriter(&b)
			require.NoError(t, err)
			_, err = w.Write(content)
			require.NoError(t, err)
			require.NoError(t, w.Close())

			return b.Bytes()
		},
		".zst": func(t *testing.T) []byte {
			enc, err := zstd.NewWriter(nil)
			require.NoError(t, err)

			return enc.EncodeAll(content, nil)
		},
		".gz": func(t *testing.T) []byte {
			var b bytes.Buffer
			w := gzip.NewWriter(&b)
			_, err := w.Write(content)
			require.NoError(t, err)
			require.NoError(t, w.Close())

			return b.Bytes()
		},
	}

	dir := t.TempDir()

	for _, tc := range []struct {
		file    string
		data    func(t *testing.T) []byte
		wantErr string
	}{
		{file: "plain.ko", data: compress[""]},
		{file: "mod.ko.xz", data: compress[".xz"]},
		{file: "mod.ko.zst", data: compress[".zst"]},
		{file: "mod.ko.gz", data: compress[".gz"]},
		{file: "firmware.bin.xz", data: compress[".xz"]},
		{file: "firmware.bin", data: compress[""]},
		{file: "corrupt.ko.xz", data: compress[""], wantErr: "error decompressing"},
		{file: "corrupt.ko.gz", data: compress[""], wantErr: "error decompressing"},
		{file: "missing.ko", wantErr: "error reading"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			path := filepath.Join(dir, tc.file)
			if tc.data != nil {
				require.NoError(t, os.WriteFile(path, tc.data(t), 0o644))
			}

			got, err := ReadDecompressed(path)
			if tc.wantErr != "" {
				assert.ErrorContains(t, err, tc.wantErr)

				return
			}

			require.NoError(t, err)
			assert.Equal(t, content, got)
		})
	}

	for path, want := range map[string]string{
		"kernel/a.ko": "", "kernel/a.ko.xz": ".xz", "kernel/a.ko.zst": ".zst", "kernel/a.ko.gz": ".gz", "fw/a.bin.xz": "",
	} {
		assert.Equal(t, want, compression(path), path)
	}
}
