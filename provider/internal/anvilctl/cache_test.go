package anvilctl_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/image-factory/pkg/client"
	"github.com/siderolabs/image-factory/pkg/schematic"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/anvil-metal/anvil/internal/labfactory"
	"github.com/anvil-metal/anvil/provider/internal/control"
	"github.com/anvil-metal/anvil/provider/internal/imagecache"
	"github.com/anvil-metal/anvil/provider/internal/resources"
	"github.com/anvil-metal/anvil/provider/internal/transitions"
)

// startCacheServer runs a control server whose image cache fetches from the lab's
// factory stand-in (nil: a provider without a cache), and returns the endpoint and a
// registered schematic.
func startCacheServer(t *testing.T, withCache bool) (string, string) {
	t.Helper()

	assets := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(assets, "kernel-amd64"), []byte("KERNEL"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(assets, "initramfs-amd64.xz"), []byte("INITRAMFS"), 0o644))

	factory := httptest.NewServer(labfactory.New(labfactory.WithAssets(assets)))
	t.Cleanup(factory.Close)

	fc, err := client.New(factory.URL)
	require.NoError(t, err)

	id, _, err := fc.SchematicCreate(t.Context(), schematic.Schematic{})
	require.NoError(t, err)

	st, err := resources.Open(t.Context(), t.TempDir())
	require.NoError(t, err)

	dir, err := os.MkdirTemp("", "anvilctl")
	require.NoError(t, err)

	opts := control.Options{SocketPath: filepath.Join(dir, "control.sock")}

	if withCache {
		cache, err := imagecache.New(imagecache.Options{Dir: t.TempDir(), FactoryBaseURL: factory.URL, Logger: zaptest.NewLogger(t)})
		require.NoError(t, err)

		t.Cleanup(func() { require.NoError(t, cache.Close()) })

		opts.ImageCache = cache
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)

	go func() { done <- control.New(st, transitions.New(st, transitions.Options{}), opts).Run(ctx) }()

	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
		require.NoError(t, st.Close())
		require.NoError(t, os.RemoveAll(dir))
	})

	require.Eventually(t, func() bool {
		_, err := os.Stat(opts.SocketPath)

		return err == nil
	}, 5*time.Second, 10*time.Millisecond)

	return "unix://" + opts.SocketPath, id
}

func TestCache(t *testing.T) {
	t.Parallel()

	endpoint, id := startCacheServer(t, true)

	out := mustRun(t, endpoint, "cache", "list")
	assert.Equal(t, []string{"SCHEMATIC", "VERSION", "FILE", "SIZE", "DIGEST", "FETCHED", "USED"}, strings.Fields(out))

	out = mustRun(t, endpoint, "cache", "pull", id, "v1.9.0")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 4, out)
	assert.Equal(t, []string{id, "v1.9.0", "kernel-amd64", "6B"}, strings.Fields(lines[1])[:4])
	assert.Equal(t, []string{id, "v1.9.0", "initramfs-amd64.xz", "9B"}, strings.Fields(lines[2])[:4])
	assert.Equal(t, "cmdline-metal-amd64", strings.Fields(lines[3])[2])
	assert.Len(t, strings.Fields(lines[1])[4], 12, "a short digest")
	assert.Contains(t, lines[1], "s ago")

	_, errOut, code := run(t, endpoint, "cache", "pull", id, "v1.9.0", "--arch", "riscv64")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, `architecture "riscv64" is not one of amd64, arm64`)

	_, errOut, code = run(t, endpoint, "cache", "pull", "default", "v1.9.0")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "is not 64 lowercase hex digits")

	var images []map[string]any

	require.NoError(t, json.Unmarshal([]byte(mustRun(t, endpoint, "cache", "list", "-o", "json")), &images))
	require.Len(t, images, 3)
	assert.Equal(t, id, images[0]["schematic"])
	assert.Equal(t, "cmdline-metal-amd64", images[0]["file"])
	assert.Contains(t, images[0]["digest"], "sha256:")

	_, errOut, code = run(t, endpoint, "cache", "prune")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "say what to prune")

	out = mustRun(t, endpoint, "cache", "prune", "--older-than", "1h")
	assert.Equal(t, "pruned 0 cached assets, 0B\n", out, "all were just used")

	out = mustRun(t, endpoint, "cache", "prune", "--keep-schematic", id)
	assert.Equal(t, "pruned 0 cached assets, 0B\n", out)

	out = mustRun(t, endpoint, "cache", "prune", "--all")
	assert.Contains(t, out, "removed "+id+"/v1.9.0/kernel-amd64 (")
	assert.Contains(t, out, "pruned 3 cached assets")

	assert.Len(t, strings.Split(strings.TrimSpace(mustRun(t, endpoint, "cache", "list")), "\n"), 1)
}

func TestCacheNone(t *testing.T) {
	t.Parallel()

	endpoint, _ := startCacheServer(t, false)

	_, errOut, code := run(t, endpoint, "cache", "list")
	assert.Equal(t, 1, code)
	assert.Equal(t, "anvilctl: this provider runs without an image cache\n", errOut)
}
