package imagecache

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestConcurrentGets: 20 machines of one schematic asking for their boot assets at once
// cost one factory download per asset.
func TestConcurrentGets(t *testing.T) {
	t.Parallel()

	f := newFactory(t)
	c := newCache(t, f, t.TempDir())

	files, err := FilesFor("amd64")
	require.NoError(t, err)

	f.hold.Store(true)

	const machines = 20

	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		blobs = map[Key][]Blob{}
	)

	for range machines {
		for _, file := range files.All() {
			wg.Go(func() {
				k := f.key("v1.9.0", file)

				b, err := c.Get(t.Context(), k)
				assert.NoError(t, err)

				mu.Lock()
				blobs[k] = append(blobs[k], b)
				mu.Unlock()
			})
		}
	}

	// Each asset's download is under way; the others' requests pile up behind it.
	for range files.All() {
		<-f.arrived
	}

	time.Sleep(100 * time.Millisecond)
	f.hold.Store(false)
	close(f.release)
	wg.Wait()

	for _, file := range files.All() {
		k := f.key("v1.9.0", file)

		assert.Equal(t, 1, f.downloads(k), "one download of %s", file)
		t.Logf("%d concurrent Gets of %s: %d factory download(s)", machines, file, f.downloads(k))
		require.Len(t, blobs[k], machines)

		for _, b := range blobs[k] {
			assert.Equal(t, blobs[k][0].Digest, b.Digest)
		}
	}

	assert.Equal(t, kernelContent, read(t, blobs[f.key("v1.9.0", files.Kernel)][0].Path))
	assert.Equal(t, initramfsContent, read(t, blobs[f.key("v1.9.0", files.Initramfs)][0].Path))

	cmdline := read(t, blobs[f.key("v1.9.0", files.Cmdline)][0].Path)
	assert.True(t, strings.HasPrefix(cmdline, "talos.platform=metal "), cmdline)
	assert.True(t, strings.HasSuffix(cmdline, " console=ttyS1,115200"), "the schematic's args, last: %s", cmdline)

	assert.InDelta(t, 3, metric(t, c, "anvil_image_cache_downloads_total", "ok"), 0)
	assert.InDelta(t, 3*machines, metric(t, c, "anvil_image_cache_hits_total", "")+metric(t, c, "anvil_image_cache_misses_total", ""), 0)
	assert.Len(t, c.List(), 3)
}

// TestCorruption: a blob whose bytes changed on disk is detected, deleted and fetched
// again, whether it changed under a running cache or while the provider was down (same
// size and time: the content is checked on first use after every start).
func TestCorruption(t *testing.T) {
	t.Parallel()

	flip := func(t *testing.T, path string, keepTime bool) {
		t.Helper()

		fi, err := os.Stat(path)
		require.NoError(t, err)

		b, err := os.ReadFile(path)
		require.NoError(t, err)

		b[0] ^= 0xff
		require.NoError(t, os.WriteFile(path, b, 0o600))

		if keepTime {
			require.NoError(t, os.Chtimes(path, fi.ModTime(), fi.ModTime()))
		}
	}

	for _, tc := range []struct {
		name    string
		restart bool
	}{
		{"while running", false},
		{"while down", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			f := newFactory(t)
			dir := t.TempDir()
			c := newCache(t, f, dir)
			k := f.key("v1.9.0", "kernel-amd64")

			b, err := c.Get(t.Context(), k)
			require.NoError(t, err)

			if tc.restart {
				require.NoError(t, c.Close())
				flip(t, b.Path, true)

				c = newCache(t, f, dir)
			} else {
				flip(t, b.Path, false)
			}

			again, err := c.Get(t.Context(), k)
			require.NoError(t, err)
			assert.Equal(t, b.Digest, again.Digest)
			assert.Equal(t, kernelContent, read(t, again.Path))
			assert.Equal(t, 2, f.downloads(k), "fetched again")
			assert.InDelta(t, 1, metric(t, c, "anvil_image_cache_corrupt_total", ""), 0)

			// Checked once: the next use is a plain hit.
			_, err = c.Get(t.Context(), k)
			require.NoError(t, err)
			assert.Equal(t, 2, f.downloads(k))
		})
	}
}

// TestCallerGivesUp: a caller whose context ends stops waiting; the download goes on and
// the others get it.
func TestCallerGivesUp(t *testing.T) {
	t.Parallel()

	f := newFactory(t)
	c := newCache(t, f, t.TempDir())
	k := f.key("v1.9.0", "kernel-amd64")

	f.hold.Store(true)

	ctx, cancel := context.WithCancel(t.Context())
	gaveUp := make(chan error, 1)

	go func() {
		_, err := c.Get(ctx, k)
		gaveUp <- err
	}()

	<-f.arrived

	waited := make(chan Blob, 1)

	go func() {
		b, err := c.Get(t.Context(), k)
		assert.NoError(t, err)
		waited <- b
	}()

	cancel()
	require.ErrorIs(t, <-gaveUp, context.Canceled)

	f.hold.Store(false)
	close(f.release)

	b := <-waited
	assert.Equal(t, kernelContent, read(t, b.Path))
	assert.Equal(t, 1, f.downloads(k))
}
