package httpapi_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/siderolabs/image-factory/pkg/client"
	"github.com/siderolabs/image-factory/pkg/schematic"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/anvil-metal/anvil/internal/labfactory"
	"github.com/anvil-metal/anvil/provider/internal/httpapi"
	"github.com/anvil-metal/anvil/provider/internal/imagecache"
	"github.com/anvil-metal/anvil/provider/internal/machineview"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

const (
	talosKernel    = "TALOS-KERNEL-0123456789"
	talosInitramfs = "TALOS-INITRAMFS-0123456789"
)

// assetFixture is the provider's HTTP server over an image cache that fetches from the
// lab's factory stand-in; hold keeps the factory's /image/ answers until release closes.
type assetFixture struct {
	factory    *labfactory.Factory
	factorySrv *httptest.Server
	schematic  string
	cache      *imagecache.Cache
	url        string
	store      *resources.Store
	view       *machineview.View

	hold    atomic.Bool
	arrived chan string
	release chan struct{}
}

func newAssetFixture(t *testing.T, tweaks ...func(*imagecache.Options)) *assetFixture {
	t.Helper()

	assets := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(assets, "kernel-amd64"), []byte(talosKernel), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(assets, "initramfs-amd64.xz"), []byte(talosInitramfs), 0o644))

	f := &assetFixture{
		factory: labfactory.New(labfactory.WithAssets(assets)),
		arrived: make(chan string, 100),
		release: make(chan struct{}),
	}

	f.factorySrv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/image/") && f.hold.Load() {
			f.arrived <- r.URL.Path
			<-f.release
		}

		f.factory.ServeHTTP(w, r)
	}))
	t.Cleanup(f.factorySrv.Close)

	fc, err := client.New(f.factorySrv.URL)
	require.NoError(t, err)

	var sc schematic.Schematic

	sc.Customization.ExtraKernelArgs = []string{"console=ttyS1,115200"}

	f.schematic, _, err = fc.SchematicCreate(t.Context(), sc)
	require.NoError(t, err)

	cacheOpts := imagecache.Options{Dir: t.TempDir(), FactoryBaseURL: f.factorySrv.URL, Logger: zaptest.NewLogger(t)}
	for _, tweak := range tweaks {
		tweak(&cacheOpts)
	}

	f.cache, err = imagecache.New(cacheOpts)
	require.NoError(t, err)

	t.Cleanup(func() { assert.NoError(t, f.cache.Close()) })

	// The provider boots Talos v1.9.0 of the schematic (and of one the factory does not
	// know): machines are allocated to them.
	f.store, err = resources.Open(t.Context(), t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { f.store.Close() })

	f.view = machineview.New()
	ctx, cancel := context.WithCancel(context.Background())
	viewDone := make(chan error, 1)

	go func() { viewDone <- f.view.Run(ctx, f.store) }()

	t.Cleanup(func() {
		cancel()
		<-viewDone //nolint:errcheck // the view's end, not its error, is waited for
	})

	f.allocate(t, "m1", f.schematic, "v1.9.0")
	f.allocate(t, "m2", strings.Repeat("0", 64), "v1.9.0")

	srv := httptest.NewServer(httpapi.New(httpapi.Options{
		ImageCache: f.cache, View: f.view, Registry: prometheus.NewRegistry(), Logger: zaptest.NewLogger(t),
	}).Handler())
	t.Cleanup(srv.Close)

	f.url = srv.URL

	return f
}

// allocate allocates a machine to Talos of the schematic at the version.
func (f *assetFixture) allocate(t *testing.T, id, schematic, version string) {
	t.Helper()

	in := resources.NewMachineIntent(id)
	in.TypedSpec().Acceptance = resources.AcceptanceAccepted
	in.TypedSpec().Allocation = &resources.Allocation{ID: "a-" + id, TalosVersion: version, SchematicID: schematic}
	require.NoError(t, f.store.Create(t.Context(), in))
	require.Eventually(t, func() bool { return f.view.Serves(schematic, version) }, 5*time.Second, time.Millisecond)
}

func (f *assetFixture) path(version, file string) string {
	return "/assets/talos/" + f.schematic + "/" + version + "/" + file
}

func (f *assetFixture) do(t *testing.T, method, path string, header http.Header) (*http.Response, string) {
	t.Helper()

	req, err := http.NewRequestWithContext(t.Context(), method, f.url+path, nil)
	require.NoError(t, err)

	for k, v := range header {
		req.Header[k] = v
	}

	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)

	defer resp.Body.Close()

	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)

	return resp, string(body)
}

// TestTalosAssetsOneDownload: 20 machines of one schematic fetching their kernel,
// initramfs and cmdline at once (as their iPXE scripts or kexec orders have them) cost
// the factory one download per asset.
func TestTalosAssetsOneDownload(t *testing.T) {
	t.Parallel()

	f := newAssetFixture(t)
	files := []string{"kernel-amd64", "initramfs-amd64.xz", "cmdline-metal-amd64"}

	f.hold.Store(true)

	const machines = 20

	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		bodies = map[string][]string{}
	)

	for range machines {
		for _, file := range files {
			wg.Go(func() {
				resp, err := http.Get(f.url + f.path("v1.9.0", file)) //nolint:noctx // the test's own server
				if !assert.NoError(t, err) {
					return
				}

				defer resp.Body.Close()

				body, err := io.ReadAll(resp.Body)
				assert.NoError(t, err)
				assert.Equal(t, http.StatusOK, resp.StatusCode)

				mu.Lock()
				bodies[file] = append(bodies[file], string(body))
				mu.Unlock()
			})
		}
	}

	for range files {
		<-f.arrived
	}

	time.Sleep(100 * time.Millisecond)
	f.hold.Store(false)
	close(f.release)
	wg.Wait()

	for _, file := range files {
		downloads := f.factory.Downloads("/image/" + f.schematic + "/v1.9.0/" + file)
		assert.Equal(t, 1, downloads, "downloads of %s", file)
		t.Logf("%d concurrent GETs of /assets/talos/.../%s: %d factory download(s)", machines, file, downloads)
		assert.Len(t, bodies[file], machines)
	}

	assert.Equal(t, talosKernel, bodies["kernel-amd64"][0])
	assert.Equal(t, talosInitramfs, bodies["initramfs-amd64.xz"][0])
	assert.Contains(t, bodies["cmdline-metal-amd64"][0], "talos.platform=metal ")
	assert.Contains(t, bodies["cmdline-metal-amd64"][0], " console=ttyS1,115200", "the schematic's args, as the factory has them")
}

func TestTalosAssets(t *testing.T) {
	t.Parallel()

	f := newAssetFixture(t)

	kernel, err := f.cache.Get(t.Context(), imagecache.Key{Schematic: f.schematic, Version: "v1.9.0", File: "kernel-amd64"})
	require.NoError(t, err)

	etag := `"` + kernel.Digest + `"`

	for _, tc := range []struct {
		name, method, path string
		header             http.Header
		status             int
		body               string
		contentType        string
	}{
		{name: "kernel", method: http.MethodGet, path: f.path("v1.9.0", "kernel-amd64"), status: http.StatusOK, body: talosKernel, contentType: "application/octet-stream"},
		{name: "head", method: http.MethodHead, path: f.path("v1.9.0", "kernel-amd64"), status: http.StatusOK, contentType: "application/octet-stream"},
		{name: "unchanged", method: http.MethodGet, path: f.path("v1.9.0", "kernel-amd64"), header: http.Header{"If-None-Match": {etag}}, status: http.StatusNotModified},
		{name: "range", method: http.MethodGet, path: f.path("v1.9.0", "kernel-amd64"), header: http.Header{"Range": {"bytes=0-4"}}, status: http.StatusPartialContent, body: talosKernel[:5]},
		{name: "cmdline", method: http.MethodGet, path: f.path("v1.9.0", "cmdline-metal-amd64"), status: http.StatusOK, contentType: "text/plain; charset=utf-8"},
		{name: "bad schematic", method: http.MethodGet, path: "/assets/talos/default/v1.9.0/kernel-amd64", status: http.StatusNotFound, body: "not 64 lowercase hex digits"},
		{name: "bad version", method: http.MethodGet, path: f.path("latest", "kernel-amd64"), status: http.StatusNotFound, body: "is not a Talos version"},
		{name: "bad file", method: http.MethodGet, path: f.path("v1.9.0", "metal-amd64.raw"), status: http.StatusNotFound},
		{name: "too deep", method: http.MethodGet, path: f.path("v1.9.0", "kernel-amd64/x"), status: http.StatusNotFound},
		{name: "unknown to the factory", method: http.MethodGet, path: "/assets/talos/" + strings.Repeat("0", 64) + "/v1.9.0/kernel-amd64", status: http.StatusNotFound, body: "no such boot asset"},
		{name: "not for posting", method: http.MethodPost, path: f.path("v1.9.0", "kernel-amd64"), status: http.StatusMethodNotAllowed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := f.do(t, tc.method, tc.path, tc.header)
			assert.Equal(t, tc.status, resp.StatusCode, body)

			if tc.body != "" {
				assert.Contains(t, body, tc.body)
			}

			if tc.contentType != "" {
				assert.Equal(t, tc.contentType, resp.Header.Get("Content-Type"))
			}

			if tc.status == http.StatusOK && strings.HasSuffix(tc.path, "kernel-amd64") {
				assert.Equal(t, etag, resp.Header.Get("Etag"))
				assert.Equal(t, "23", resp.Header.Get("Content-Length"))
			}
		})
	}

	assert.Equal(t, 1, f.factory.Downloads("/image/"+f.schematic+"/v1.9.0/kernel-amd64"))
}

// TestTalosAssetsFactoryDown: what is cached still serves; what is not is a 502.
func TestTalosAssetsFactoryDown(t *testing.T) {
	t.Parallel()

	f := newAssetFixture(t)

	resp, _ := f.do(t, http.MethodGet, f.path("v1.9.0", "initramfs-amd64.xz"), nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)

	f.factorySrv.Close()

	resp, body := f.do(t, http.MethodGet, f.path("v1.9.0", "initramfs-amd64.xz"), nil)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, talosInitramfs, body)

	resp, body = f.do(t, http.MethodGet, f.path("v1.9.0", "kernel-amd64"), nil)
	assert.Equal(t, http.StatusBadGateway, resp.StatusCode)
	assert.Equal(t, "the image factory could not be reached and the boot asset is not cached\n", body)
}

// TestTalosAssetsNoCache: a server without a cache says so.
func TestTalosAssetsNoCache(t *testing.T) {
	t.Parallel()

	srv := httptest.NewServer(httpapi.New(httpapi.Options{Registry: prometheus.NewRegistry(), Logger: zaptest.NewLogger(t)}).Handler())
	t.Cleanup(srv.Close)

	resp, err := http.Get(srv.URL + "/assets/talos/" + strings.Repeat("0", 64) + "/v1.9.0/kernel-amd64") //nolint:noctx // the test's own server
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
}

// TestTalosAssetsOnlyServed: a schematic and version no machine of the provider boots is
// not fetched from the factory for whoever asks, registered with the factory or not.
func TestTalosAssetsOnlyServed(t *testing.T) {
	t.Parallel()

	f := newAssetFixture(t)

	for _, path := range []string{
		f.path("v1.9.1", "kernel-amd64"), // another version of a schematic served
		"/assets/talos/" + strings.Repeat("3", 64) + "/v1.9.0/initramfs-amd64.xz",
	} {
		resp, body := f.do(t, http.MethodGet, path, nil)
		assert.Equal(t, http.StatusNotFound, resp.StatusCode, path)
		assert.Contains(t, body, "no machine of this provider boots Talos v1.9.")
	}

	assert.Equal(t, 0, f.factory.Downloads("/image/"+f.schematic+"/v1.9.1/kernel-amd64"), "no download")
	assert.Empty(t, f.cache.List())

	// Once a machine is allocated to it, it is.
	f.allocate(t, "m3", f.schematic, "v1.9.1")

	resp, body := f.do(t, http.MethodGet, f.path("v1.9.1", "kernel-amd64"), nil)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, talosKernel, body)
}

// TestTalosAssetsBusy: past the downloads the cache runs at once, a request that waited
// its turn in vain is told to ask again.
func TestTalosAssetsBusy(t *testing.T) {
	t.Parallel()

	f := newAssetFixture(t, func(o *imagecache.Options) { o.Downloads, o.DownloadWait = 1, 100*time.Millisecond })

	f.hold.Store(true)

	var once sync.Once

	release := func() {
		once.Do(func() {
			f.hold.Store(false)
			close(f.release)
		})
	}
	t.Cleanup(release)

	first := make(chan int, 1)

	go func() {
		resp, err := http.Get(f.url + f.path("v1.9.0", "kernel-amd64")) //nolint:noctx // the test's own server
		if !assert.NoError(t, err) {
			first <- 0

			return
		}

		resp.Body.Close()
		first <- resp.StatusCode
	}()

	<-f.arrived

	resp, body := f.do(t, http.MethodGet, f.path("v1.9.0", "initramfs-amd64.xz"), nil)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, body)
	assert.Equal(t, "10", resp.Header.Get("Retry-After"))

	release()
	assert.Equal(t, http.StatusOK, <-first)
}
