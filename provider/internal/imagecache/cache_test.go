package imagecache

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/siderolabs/image-factory/pkg/client"
	"github.com/siderolabs/image-factory/pkg/schematic"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/anvil-metal/anvil/internal/labfactory"
)

const (
	kernelContent    = "KERNEL-0123456789"
	initramfsContent = "INITRAMFS-0123456789-0123456789"
)

// factory is the lab's Image Factory stand-in behind httptest, with one schematic
// registered; hold makes its /image/ answers wait until release is closed.
type factory struct {
	*labfactory.Factory

	srv       *httptest.Server
	schematic string

	hold    atomic.Bool
	arrived chan string
	release chan struct{}
}

func newFactory(t *testing.T) *factory {
	t.Helper()

	assets := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(assets, "kernel-amd64"), []byte(kernelContent), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(assets, "initramfs-amd64.xz"), []byte(initramfsContent), 0o644))

	f := &factory{
		Factory: labfactory.New(labfactory.WithAssets(assets)),
		arrived: make(chan string, 100),
		release: make(chan struct{}),
	}

	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/image/") && f.hold.Load() {
			f.arrived <- r.URL.Path
			<-f.release
		}

		f.ServeHTTP(w, r)
	}))
	t.Cleanup(f.srv.Close)

	c, err := client.New(f.srv.URL)
	require.NoError(t, err)

	var sc schematic.Schematic

	// The schematic's args travel in the cmdline as they are.
	sc.Customization.ExtraKernelArgs = []string{"console=ttyS1,115200"}

	f.schematic, _, err = c.SchematicCreate(t.Context(), sc)
	require.NoError(t, err)

	return f
}

func (f *factory) key(version, file string) Key {
	return Key{Schematic: f.schematic, Version: version, File: file}
}

func (f *factory) downloads(k Key) int { return f.Downloads("/image/" + k.String()) }

func newCache(t *testing.T, f *factory, dir string, opts ...func(*Options)) *Cache {
	t.Helper()

	o := Options{Dir: dir, FactoryBaseURL: f.srv.URL, Logger: zaptest.NewLogger(t), Registry: prometheus.NewRegistry()}
	for _, opt := range opts {
		opt(&o)
	}

	c, err := New(o)
	require.NoError(t, err)

	t.Cleanup(func() { assert.NoError(t, c.Close()) })

	return c
}

// metric reads a metric of the cache's registry: a counter, or a gauge; with a label
// value, the child of that value.
func metric(t *testing.T, c *Cache, name, label string) float64 {
	t.Helper()

	families, err := c.opts.Registry.Gather()
	require.NoError(t, err)

	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}

		for _, m := range mf.GetMetric() {
			if label != "" && (len(m.GetLabel()) != 1 || m.GetLabel()[0].GetValue() != label) {
				continue
			}

			return m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}

	return 0
}

func read(t *testing.T, path string) string {
	t.Helper()

	b, err := os.ReadFile(path)
	require.NoError(t, err)

	return string(b)
}

// TestRestart: a new cache on the same directory serves what the last one fetched, with
// no download; an entry whose blob went missing is dropped, a stray blob deleted.
func TestRestart(t *testing.T) {
	t.Parallel()

	f := newFactory(t)
	dir := filepath.Join(t.TempDir(), "image-cache")

	first, err := New(Options{Dir: dir, FactoryBaseURL: f.srv.URL, Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)

	kernel, initramfs := f.key("v1.9.0", "kernel-amd64"), f.key("v1.9.0", "initramfs-amd64.xz")

	for _, k := range []Key{kernel, initramfs} {
		_, err = first.Get(t.Context(), k)
		require.NoError(t, err)
	}

	require.NoError(t, first.Close())

	_, err = first.Get(t.Context(), kernel)
	require.ErrorIs(t, err, ErrClosed)

	fi, err := os.Stat(dir)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), fi.Mode().Perm())

	stray := filepath.Join(dir, "blobs", "sha256", strings.Repeat("0", 64))
	require.NoError(t, os.WriteFile(stray, []byte("stray"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, tempPrefix+"1234"), []byte("cut short"), 0o600))

	second := newCache(t, f, dir)
	require.Len(t, second.List(), 2)

	b, err := second.Get(t.Context(), kernel)
	require.NoError(t, err)
	assert.Equal(t, kernelContent, read(t, b.Path))
	assert.Equal(t, 1, f.downloads(kernel), "served from disk")
	assert.NoFileExists(t, stray)
	assert.NoFileExists(t, filepath.Join(dir, tempPrefix+"1234"))

	// The initramfs's blob disappears while the provider is down.
	ib, err := second.Get(t.Context(), initramfs)
	require.NoError(t, err)
	require.NoError(t, second.Close())
	require.NoError(t, os.Remove(ib.Path))

	third := newCache(t, f, dir)
	assert.Equal(t, []Key{kernel}, keys(third.List()))

	b, err = third.Get(t.Context(), initramfs)
	require.NoError(t, err)
	assert.Equal(t, initramfsContent, read(t, b.Path))
	assert.Equal(t, 2, f.downloads(initramfs))

	// A broken index is no reason to stay down: its blobs are fetched again.
	require.NoError(t, third.Close())
	require.NoError(t, os.WriteFile(filepath.Join(dir, indexName), []byte("{not json"), 0o600))

	fourth := newCache(t, f, dir)
	assert.Empty(t, fourth.List())

	entries, err := os.ReadDir(filepath.Join(dir, "blobs", "sha256"))
	require.NoError(t, err)
	assert.Empty(t, entries)
}

func keys(bs []Blob) []Key {
	out := make([]Key, 0, len(bs))
	for _, b := range bs {
		out = append(out, b.Key)
	}

	return out
}

// TestAirGapped: with the factory gone, what was cached serves; what was not is an
// error that says the factory could not be reached and names the asset.
func TestAirGapped(t *testing.T) {
	t.Parallel()

	f := newFactory(t)
	dir := t.TempDir()

	seed := newCache(t, f, dir)
	files, err := FilesFor("amd64")
	require.NoError(t, err)

	for _, file := range files.All() {
		_, err := seed.Pull(t.Context(), f.key("v1.9.0", file))
		require.NoError(t, err)
	}

	require.NoError(t, seed.Close())
	f.srv.Close()

	c := newCache(t, f, dir)

	file, b, err := c.Open(t.Context(), f.key("v1.9.0", files.Initramfs))
	require.NoError(t, err)

	content, err := io.ReadAll(file)
	require.NoError(t, err)
	require.NoError(t, file.Close())
	assert.Equal(t, initramfsContent, string(content))
	assert.Equal(t, int64(len(initramfsContent)), b.Size)

	missing := f.key("v1.10.0", files.Kernel)
	_, err = c.Get(t.Context(), missing)
	require.ErrorIs(t, err, ErrFactoryUnreachable)
	assert.ErrorContains(t, err, "boot asset "+missing.String()+" is not cached and the image factory could not be reached at "+f.srv.URL)
	assert.InDelta(t, 1, metric(t, c, "anvil_image_cache_downloads_total", "error"), 0)
}

// TestFactoryAnswers: the factory's refusals and oversized assets are errors that say so;
// bad keys never reach it.
func TestFactoryAnswers(t *testing.T) {
	t.Parallel()

	f := newFactory(t)
	c := newCache(t, f, t.TempDir(), func(o *Options) { o.MaxDownload = int64(len(kernelContent)) })

	unknown := Key{Schematic: strings.Repeat("0", 64), Version: "v1.9.0", File: "kernel-amd64"}

	_, err := c.Get(t.Context(), unknown)

	var se *FactoryStatusError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, http.StatusNotFound, se.Status)
	assert.ErrorContains(t, err, "answered 404 Not Found for boot asset "+unknown.String()+": unknown schematic")

	_, err = c.Get(t.Context(), f.key("v1.9.0", "initramfs-amd64.xz"))
	assert.ErrorContains(t, err, "is "+strconv.Itoa(len(initramfsContent))+" bytes, more than the "+strconv.Itoa(len(kernelContent))+" allowed")

	_, err = c.Get(t.Context(), f.key("v1.9.0", "kernel-amd64"))
	require.NoError(t, err, "an asset of the limit's size")

	for _, k := range []Key{
		{Schematic: "../../etc", Version: "v1.9.0", File: "kernel-amd64"},
		f.key("1.9.0", "kernel-amd64"),
		f.key("v1.9.0", "metal-amd64.raw"),
	} {
		_, err := c.Get(t.Context(), k)
		require.ErrorIs(t, err, ErrInvalidKey, k)

		_, _, err = c.Open(t.Context(), k)
		require.ErrorIs(t, err, ErrInvalidKey, k)
	}

	assert.Empty(t, f.arrived)
	assert.Len(t, c.List(), 1)

	entries, err := os.ReadDir(c.opts.Dir)
	require.NoError(t, err)

	for _, e := range entries {
		assert.False(t, strings.HasPrefix(e.Name(), tempPrefix), "no download left behind: %s", e.Name())
	}
}

func TestNewOptions(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name string
		opts Options
		err  string
	}{
		{"no dir", Options{FactoryBaseURL: "https://factory.talos.dev"}, "needs a directory"},
		{"no URL", Options{Dir: t.TempDir()}, "invalid image factory base URL"},
		{"not http", Options{Dir: t.TempDir(), FactoryBaseURL: "ftp://factory"}, "invalid image factory base URL"},
		{"password hidden", Options{Dir: t.TempDir(), FactoryBaseURL: "ftp://user:secret@factory"}, "user:xxxxx@factory"},
		{"negative size", Options{Dir: t.TempDir(), FactoryBaseURL: "https://factory.talos.dev", MaxBytes: -1}, "must not be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			_, err := New(tc.opts)
			require.ErrorContains(t, err, tc.err)
			assert.NotContains(t, err.Error(), "secret")
		})
	}
}
