package imagecache

import (
	"context"
	"io"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestEviction: over MaxBytes the least recently used blob goes, never one being served.
func TestEviction(t *testing.T) {
	t.Parallel()

	f := newFactory(t)

	// The cmdline differs by version; all are the same size.
	v := func(version string) Key { return f.key(version, "cmdline-metal-amd64") }

	probe := newCache(t, f, t.TempDir())
	b, err := probe.Get(t.Context(), v("v1.9.0"))
	require.NoError(t, err)

	c := newCache(t, f, t.TempDir(), func(o *Options) { o.MaxBytes = 2*b.Size + b.Size/2 })

	get := func(version string) Blob {
		t.Helper()

		b, err := c.Get(t.Context(), v(version))
		require.NoError(t, err)

		return b
	}

	b0 := get("v1.9.0")
	b1 := get("v1.9.1")
	get("v1.9.0") // v1.9.1 is now the least recently used
	get("v1.9.2")

	assert.Equal(t, []Key{v("v1.9.0"), v("v1.9.2")}, keys(c.List()))
	assert.NoFileExists(t, b1.Path)
	assert.FileExists(t, b0.Path)
	assert.InDelta(t, 1, metric(t, c, "anvil_image_cache_evictions_total", ""), 0)

	// v1.9.0 is the least recently used but being served: v1.9.2 goes instead.
	file, served, err := c.Open(t.Context(), v("v1.9.0"))
	require.NoError(t, err)

	get("v1.9.2")
	get("v1.9.3")

	assert.Equal(t, []Key{v("v1.9.0"), v("v1.9.3")}, keys(c.List()))

	content, err := io.ReadAll(file)
	require.NoError(t, err)
	assert.Contains(t, string(content), "anvil.lab.version=v1.9.0")
	assert.Equal(t, served.Size, int64(len(content)))

	// Closed, it may go.
	require.NoError(t, file.Close())
	get("v1.9.4")
	assert.Equal(t, []Key{v("v1.9.3"), v("v1.9.4")}, keys(c.List()))
	assert.NoFileExists(t, served.Path)

	// The index went to disk with the evictions.
	idx, err := readIndex(filepath.Join(c.opts.Dir, indexName))
	require.NoError(t, err)
	assert.Len(t, idx.Entries, 2)
}

// TestPrune: what keep does not want goes, except what is being served; a blob another
// key still holds stays.
func TestPrune(t *testing.T) {
	t.Parallel()

	f := newFactory(t)
	c := newCache(t, f, t.TempDir())

	// Every version's kernel is the same blob.
	old, cur := f.key("v1.9.0", "kernel-amd64"), f.key("v1.9.1", "kernel-amd64")
	oldCmdline, curCmdline := f.key("v1.9.0", "cmdline-metal-amd64"), f.key("v1.9.1", "cmdline-metal-amd64")

	blobs := map[Key]Blob{}

	for _, k := range []Key{old, cur, oldCmdline, curCmdline} {
		b, err := c.Get(t.Context(), k)
		require.NoError(t, err)

		blobs[k] = b
	}

	require.Equal(t, blobs[old].Digest, blobs[cur].Digest)

	removed, err := c.Prune(t.Context(), func(k Key) bool { return k.Version == "v1.9.1" })
	require.NoError(t, err)
	assert.Equal(t, []Key{oldCmdline, old}, keys(removed))
	assert.Equal(t, []Key{curCmdline, cur}, keys(c.List()))
	assert.FileExists(t, blobs[cur].Path, "v1.9.1's kernel is the same blob")
	assert.NoFileExists(t, blobs[oldCmdline].Path)

	file, _, err := c.Open(t.Context(), cur)
	require.NoError(t, err)

	removed, err = c.Prune(t.Context(), nil)
	require.NoError(t, err)
	assert.Equal(t, []Key{curCmdline}, keys(removed))
	assert.Equal(t, []Key{cur}, keys(c.List()), "being served")

	require.NoError(t, file.Close())

	removed, err = c.Prune(t.Context(), nil)
	require.NoError(t, err)
	assert.Equal(t, []Key{cur}, keys(removed))
	assert.Empty(t, c.List())
	assert.NoFileExists(t, blobs[cur].Path)

	ctx, cancel := context.WithCancel(t.Context())
	cancel()

	_, err = c.Prune(ctx, nil)
	require.ErrorIs(t, err, context.Canceled)
}
