//go:build lab

package wipe_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/agent/internal/wipe"
)

// loopDisk attaches a sparse file of size with a 4 KiB pattern block at each of marks
// as a loop device, detached again when the test ends, pass or fail.
func loopDisk(t *testing.T, size int64, marks []int64) (dev, file string) {
	t.Helper()

	if _, err := exec.LookPath("losetup"); err != nil {
		t.Skip("losetup is missing (util-linux): no loop devices to test on")
	}

	if _, err := os.Stat("/dev/loop-control"); err != nil || os.Geteuid() != 0 {
		t.Skip("loop devices need root and /dev/loop-control")
	}

	file = markedImage(t, filepath.Join(t.TempDir(), "disk.img"), size, marks)

	out, err := exec.CommandContext(t.Context(), "losetup", "--find", "--show", file).CombinedOutput()
	if err != nil {
		t.Skipf("no loop device could be attached (losetup: %v: %s)", err, out)
	}

	dev = strings.TrimSpace(string(out))

	t.Cleanup(func() {
		if out, err := exec.Command("losetup", "--detach", dev).CombinedOutput(); err != nil {
			t.Errorf("error detaching %s: %v: %s", dev, err, out)
		}
	})

	return dev, file
}

func TestLabFastWipeLoop(t *testing.T) {
	for _, tc := range []struct {
		name string
		size int64
	}{
		{"10GiB", 10 << 30},
		{"1TiB", 1 << 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			size := tc.size
			// The start, the primary GPT's end, the btrfs mirror, the middle, the last block
			// (the backup GPT) and just inside the last 16 MiB.
			marks := []int64{0, 1 << 20, 64 << 20, size / 2, size - 4096, size - 8<<20}
			dev, file := loopDisk(t, size, marks)

			report, err := wipe.Device(t.Context(), dev, wipe.ModeFast, nil)
			require.NoError(t, err)
			assert.Equal(t, "discard, zeroed edges", report.Method, "a loop device passes discard to its file")
			assert.Equal(t, uint64(32<<20+4096), report.Bytes)

			zero := make([]byte, 4096)

			// The middle too: fast mode discards the whole device first, and a loop device
			// punches the discarded range out of its file. Where nothing discards, fast
			// mode leaves the middle alone (TestFastWipeLeavesMiddleWithoutDiscard).
			for _, off := range marks {
				assert.Equal(t, zero, readAt(t, file, off, 4096), "data at %d must be gone", off)
			}

			// Fast wipe must not write the whole disk: what it wrote is its 32 MiB of edges.
			assert.Less(t, allocated(t, file), int64(64<<20), "the image stays sparse")
		})
	}
}

func TestLabZeroWipeLoop(t *testing.T) {
	const size = 256 << 20

	marks := []int64{0, 1 << 20, 64 << 20, 100<<20 + 12345&^4095, size / 2, size - 4096}
	dev, file := loopDisk(t, size, marks)

	// Fill the whole disk, so that every byte has something to lose.
	fill := bytes.Repeat([]byte{0x3c}, 4<<20)

	f, err := os.OpenFile(dev, os.O_WRONLY, 0)
	require.NoError(t, err)

	for off := int64(0); off < size; off += int64(len(fill)) {
		_, err = f.WriteAt(fill, off)
		require.NoError(t, err)
	}

	require.NoError(t, f.Close())

	var last uint64

	report, err := wipe.Device(t.Context(), dev, wipe.ModeZeroes, func(_ string, done, total uint64) {
		assert.Equal(t, uint64(size), total)
		last = done
	})
	require.NoError(t, err)
	assert.Equal(t, "zeroes", report.Method)
	assert.Equal(t, uint64(size), report.Bytes)
	assert.Equal(t, uint64(size), last)

	// Every byte, read from the backing file on the host.
	content, err := os.ReadFile(file)
	require.NoError(t, err)
	require.Len(t, content, size)

	if i := bytes.IndexFunc(content, func(r rune) bool { return r != 0 }); i >= 0 {
		t.Fatalf("byte at %d is not zero after the zero wipe", i)
	}
}
