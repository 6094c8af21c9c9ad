package wipe_test

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/agent/internal/wipe"
)

// markedImage creates a sparse file of size at path with a pattern block at each of marks.
func markedImage(t *testing.T, path string, size int64, marks []int64) string {
	t.Helper()

	f, err := os.Create(path)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(size))

	for _, off := range marks {
		_, err = f.WriteAt(pattern(off), off)
		require.NoError(t, err)
	}

	require.NoError(t, f.Close())

	return path
}

func pattern(off int64) []byte {
	return bytes.Repeat([]byte{0xa5, byte(off >> 20), 0x5a, byte(off >> 30)}, 1024)
}

func readAt(t *testing.T, file string, off int64, n int) []byte {
	t.Helper()

	f, err := os.Open(file)
	require.NoError(t, err)

	defer f.Close()

	buf := make([]byte, n)
	_, err = f.ReadAt(buf, off)
	require.NoError(t, err)

	return buf
}

func allocated(t *testing.T, file string) int64 {
	t.Helper()

	st, err := os.Stat(file)
	require.NoError(t, err)

	return st.Sys().(*syscall.Stat_t).Blocks * 512
}

// TestFastWipeLeavesMiddleWithoutDiscard proves fast mode writes only the edges where nothing discards:
// the same marks on a file, whose middle survives.
func TestFastWipeLeavesMiddleWithoutDiscard(t *testing.T) {
	t.Parallel()

	const size = 10 << 30

	marks := []int64{0, 64 << 20, size / 2, size - 4096}
	file := markedImage(t, filepath.Join(t.TempDir(), "disk.img"), size, marks)

	report, err := wipe.Device(t.Context(), file, wipe.ModeFast, nil)
	require.NoError(t, err)
	assert.Equal(t, "zeroed edges", report.Method)
	assert.Equal(t, pattern(size/2), readAt(t, file, size/2, 4096), "fast wipe leaves the middle alone")
	assert.Equal(t, make([]byte, 4096), readAt(t, file, size-4096, 4096))
	assert.Less(t, allocated(t, file), int64(64<<20), "the image stays sparse")
}
