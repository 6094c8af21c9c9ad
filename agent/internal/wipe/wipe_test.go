package wipe_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/agent/internal/wipe"
)

// disk writes a sparse "disk" with data at its ends, in the middle and at the btrfs
// mirror superblock.
func disk(t *testing.T, size int64) (string, []int64) {
	t.Helper()

	path := filepath.Join(t.TempDir(), "disk.img")

	f, err := os.Create(path)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(size))

	marks := []int64{0, 512, 1 << 20, 64 << 20, size / 2, size - 512}
	for _, off := range marks {
		_, err = f.WriteAt(bytes.Repeat([]byte{0xa5}, 512), off)
		require.NoError(t, err)
	}

	require.NoError(t, f.Close())

	return path, marks
}

func at(t *testing.T, path string, off int64) []byte {
	t.Helper()

	f, err := os.Open(path)
	require.NoError(t, err)

	defer f.Close()

	buf := make([]byte, 512)
	_, err = f.ReadAt(buf, off)
	require.NoError(t, err)

	return buf
}

func TestWipe(t *testing.T) {
	t.Parallel()

	const size = 256 << 20

	zero := make([]byte, 512)

	for _, tc := range []struct {
		mode   wipe.Mode
		middle bool // whether data in the middle survives
	}{
		{wipe.ModeFast, true},
		{wipe.ModeZeroes, false},
	} {
		t.Run(string(tc.mode), func(t *testing.T) {
			t.Parallel()

			path, marks := disk(t, size)

			var progressed uint64

			report, err := wipe.Device(t.Context(), path, tc.mode, func(_ string, done, total uint64) {
				assert.Equal(t, uint64(size), total)
				progressed = done
			})
			require.NoError(t, err)
			assert.NotEmpty(t, report.Verified)
			assert.Positive(t, report.Duration)

			for _, off := range marks {
				if off == size/2 && tc.middle {
					assert.NotEqual(t, zero, at(t, path, off), "a fast wipe leaves the middle alone")

					continue
				}

				assert.Equal(t, zero, at(t, path, off), "data at %d must be gone", off)
			}

			if tc.mode == wipe.ModeZeroes {
				assert.Equal(t, uint64(size), report.Bytes)
				assert.Equal(t, uint64(size), progressed, "progress reports the end")
			}
		})
	}
}

func TestWipeSmallDisk(t *testing.T) {
	t.Parallel()

	path, _ := disk(t, 80<<20)
	report, err := wipe.Device(t.Context(), path, wipe.ModeFast, nil)
	require.NoError(t, err)
	assert.Equal(t, uint64(32<<20), report.Bytes, "two 16 MiB edges, no room for the btrfs mirror region")
}

func TestWipeErrors(t *testing.T) {
	t.Parallel()

	_, err := wipe.Device(t.Context(), filepath.Join(t.TempDir(), "missing"), wipe.ModeFast, nil)
	assert.ErrorContains(t, err, "error opening")

	path, _ := disk(t, 1<<20)
	_, err = wipe.Device(t.Context(), path, wipe.Mode("shred"), nil)
	assert.ErrorContains(t, err, `unsupported wipe mode "shred"`)
}
