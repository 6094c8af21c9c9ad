package imagecache

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
)

// TestDownloadsBounded: however many assets are asked for at once, at most Downloads
// are fetched at a time; the rest wait their turn, and one that waits DownloadWait in
// vain fails with ErrBusy.
func TestDownloadsBounded(t *testing.T) {
	t.Parallel()

	f := newFactory(t)
	c := newCache(t, f, t.TempDir())
	release := releaseOnFailure(t, f)

	f.hold.Store(true)

	const asked = 2 * DefaultDownloads

	var wg sync.WaitGroup

	for i := range asked {
		wg.Go(func() {
			_, err := c.Get(t.Context(), f.key(fmt.Sprintf("v1.9.%d", i), "kernel-amd64"))
			assert.NoError(t, err)
		})
	}

	for range DefaultDownloads {
		<-f.arrived
	}

	select {
	case path := <-f.arrived:
		t.Fatalf("a download past the %d at once: %s", DefaultDownloads, path)
	case <-time.After(300 * time.Millisecond):
	}

	release()
	wg.Wait()

	for i := range asked {
		assert.Equal(t, 1, f.downloads(f.key(fmt.Sprintf("v1.9.%d", i), "kernel-amd64")), "v1.9.%d fetched once its turn came", i)
	}
}

func TestDownloadWaitsInVain(t *testing.T) {
	t.Parallel()

	f := newFactory(t)
	c := newCache(t, f, t.TempDir(), func(o *Options) { o.Downloads, o.DownloadWait = 1, 200*time.Millisecond })
	releaseOnFailure(t, f)

	f.hold.Store(true)

	go func() { _, _ = c.Get(context.Background(), f.key("v1.9.0", "kernel-amd64")) }()

	<-f.arrived

	start := time.Now()
	_, err := c.Get(t.Context(), f.key("v1.9.1", "kernel-amd64"))
	require.ErrorIs(t, err, ErrBusy)
	assert.Less(t, time.Since(start), 5*time.Second)
	assert.Equal(t, 0, f.downloads(f.key("v1.9.1", "kernel-amd64")))
}

// releaseOnFailure lets the factory's held answers go at the latest when the test ends,
// before the cache closes (which waits for its downloads); the function it returns lets
// them go at once.
func releaseOnFailure(t *testing.T, f *factory) func() {
	t.Helper()

	var once sync.Once

	release := func() {
		once.Do(func() {
			f.hold.Store(false)
			close(f.release)
		})
	}

	t.Cleanup(release)

	return release
}

// slowFactory answers /image/ GETs with content of a size, its Content-Length announced
// (or not: chunked), sending all of it but a byte, then the last once release is
// closed.
type slowFactory struct {
	srv      *httptest.Server
	size     int
	announce bool
	halfway  chan string
	release  chan struct{}
}

func newSlowFactory(t *testing.T, size int, announce bool) *slowFactory {
	t.Helper()

	f := &slowFactory{size: size, announce: announce, halfway: make(chan string, 16), release: make(chan struct{})}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := strings.Repeat(r.URL.Path, f.size/len(r.URL.Path)+1)[:f.size]
		if f.announce {
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		}

		_, _ = w.Write([]byte(body[:len(body)-1]))
		w.(http.Flusher).Flush()

		f.halfway <- r.URL.Path
		<-f.release

		_, _ = w.Write([]byte(body[len(body)-1:]))
	}))
	t.Cleanup(f.srv.Close)

	return f
}

func newLimitedCache(t *testing.T, factoryURL string, tweak func(*Options)) *Cache {
	t.Helper()

	o := Options{Dir: t.TempDir(), FactoryBaseURL: factoryURL, Logger: zaptest.NewLogger(t), Registry: prometheus.NewRegistry()}
	if tweak != nil {
		tweak(&o)
	}

	c, err := New(o)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, c.Close()) })

	return c
}

// downloading is the size of the temporary files of downloads under way in dir.
func downloading(t *testing.T, dir string) int64 {
	t.Helper()

	tmps, err := filepath.Glob(filepath.Join(dir, tempPrefix+"*"))
	require.NoError(t, err)

	var n int64

	for _, tmp := range tmps {
		if fi, err := os.Stat(tmp); err == nil {
			n += fi.Size()
		}
	}

	return n
}

// onDisk is the size of the cache directory's files: blobs and downloads under way.
func onDisk(t *testing.T, dir string) int64 {
	t.Helper()

	var n int64

	require.NoError(t, filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() && fi.Name() != indexName {
			n += fi.Size()
		}

		return err
	}))

	return n
}

// TestDownloadCountsAgainstMaxBytes: a download's temporary file is counted with the
// blobs: the least recently used blob makes room for it before it is written, and a
// download with no room (the rest being served) is refused.
func TestDownloadCountsAgainstMaxBytes(t *testing.T) {
	t.Parallel()

	const size = 1000

	for _, announce := range []bool{true, false} {
		t.Run(fmt.Sprintf("size announced %v", announce), func(t *testing.T) {
			t.Parallel()

			f := newSlowFactory(t, size, announce)
			close(f.release) // the first one whole

			const schematic = "0000000000000000000000000000000000000000000000000000000000000001"

			key := func(version string) Key { return Key{Schematic: schematic, Version: version, File: "kernel-amd64"} }
			c := newLimitedCache(t, f.srv.URL, func(o *Options) { o.MaxBytes = size + size/2 })

			_, err := c.Get(t.Context(), key("v1.9.0"))
			require.NoError(t, err)
			<-f.halfway

			// The next one waits for its last byte: the first blob made room for it.
			f.release = make(chan struct{})

			done := make(chan error, 1)

			go func() {
				_, err := c.Get(t.Context(), key("v1.9.1"))
				done <- err
			}()

			<-f.halfway
			require.Eventually(t, func() bool { return downloading(t, c.opts.Dir) == size-1 }, 5*time.Second, time.Millisecond)
			assert.LessOrEqual(t, onDisk(t, c.opts.Dir), c.opts.MaxBytes, "blobs and the download under way fit")
			assert.Empty(t, c.List(), "the least recently used blob went to make room")

			close(f.release)
			require.NoError(t, <-done)

			// The cached one being served, there is no room for another.
			file, _, err := c.Open(t.Context(), key("v1.9.1"))
			require.NoError(t, err)

			defer file.Close()

			_, err = c.Get(t.Context(), key("v1.9.2"))
			require.ErrorIs(t, err, ErrFull)
			assert.LessOrEqual(t, onDisk(t, c.opts.Dir), c.opts.MaxBytes)
		})
	}
}

// TestDownloadStalls: a factory that never answers, or stops sending, ends the download
// after StallTimeout, well before FetchTimeout.
func TestDownloadStalls(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name    string
		handler http.HandlerFunc
	}{
		{"no answer", func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() }},
		{"no more data", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "1000")
			_, _ = w.Write([]byte("half"))
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			srv := httptest.NewServer(tc.handler)
			t.Cleanup(srv.Close)
			t.Cleanup(srv.CloseClientConnections)

			// A client of the caller's, without the default one's header timeout.
			c := newLimitedCache(t, srv.URL, func(o *Options) {
				o.Client, o.StallTimeout, o.FetchTimeout = &http.Client{}, 200*time.Millisecond, time.Minute
			})

			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()

			start := time.Now()
			_, err := c.Get(ctx, Key{Schematic: strings.Repeat("1", 64), Version: "v1.9.0", File: "kernel-amd64"})
			require.Error(t, err)
			assert.Contains(t, err.Error(), "no data arrived for 200ms")
			assert.Less(t, time.Since(start), 5*time.Second)
		})
	}
}
