// Package imagecache keeps the Talos boot assets (kernel, initramfs, cmdline) of the
// schematics and versions machines are handed to: fetched from the Image Factory once,
// stored content-addressed (blobs/sha256/<hex>) under a directory of their own with an
// index of what key holds which blob, bounded in size (the least recently used go first),
// and served by the provider itself. A rack booting one schematic costs one download per
// asset, a restart keeps what was fetched, and a site without the factory boots from a
// cache seeded beforehand.
package imagecache

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// Defaults of Options.
const (
	DefaultMaxBytes     = 10 << 30
	DefaultMaxDownload  = 2 << 30
	DefaultFetchTimeout = 30 * time.Minute
	// DefaultDownloads bounds the downloads under way at once: each holds a connection to
	// the factory and a temporary file growing to an asset's size. A machine's Talos is
	// three assets (kernel, initramfs, cmdline), fetched one after the other: 3 serve a
	// rack of one schematic at full speed, or three schematics at once.
	DefaultDownloads = 3
	// DefaultDownloadWait is how long a download waits for its turn before it fails
	// (ErrBusy): a boot script waits 20 s and asks again, so the turn is not lost, and a
	// caller gone for good does not keep a download queued for long.
	DefaultDownloadWait = 2 * time.Minute
	// DefaultStallTimeout ends a download nothing arrived for in that long, from the
	// request on: a factory (or a proxy) that never answers or stops sending frees its
	// turn well before FetchTimeout.
	DefaultStallTimeout = 2 * time.Minute
)

// persistInterval is the longest a use of an asset waits to be written to the index: a
// boot storm must not rewrite it on every request.
const persistInterval = 5 * time.Second

// ErrClosed is returned once the cache is closed.
var ErrClosed = errors.New("the image cache is closed")

// Blob is a cached boot asset: the file holding a key's content.
type Blob struct {
	Key Key
	// Digest is the content's "sha256:<hex>", which also names the file.
	Digest string
	Size   int64
	// Path is the blob file.
	Path      string
	FetchedAt time.Time
	UsedAt    time.Time
}

// Options configure a Cache.
type Options struct {
	// Dir holds the index and the blobs; it is created (0700) if missing.
	Dir string
	// MaxBytes bounds the blobs' total size (DefaultMaxBytes when 0).
	MaxBytes int64
	// FactoryBaseURL is the Image Factory's base URL (https://factory.talos.dev).
	FactoryBaseURL string
	// Client fetches from the factory (one with a response header timeout when nil).
	Client *http.Client
	Logger *zap.Logger
	// Registry, when set, gets the cache's metrics.
	Registry *prometheus.Registry
	// MaxDownload bounds one asset (DefaultMaxDownload when 0), FetchTimeout one
	// download (DefaultFetchTimeout when 0).
	MaxDownload  int64
	FetchTimeout time.Duration
	// Downloads bounds the downloads under way at once (DefaultDownloads when 0); one
	// waits DownloadWait for its turn (DefaultDownloadWait when 0), then fails with
	// ErrBusy. StallTimeout ends one nothing arrived for in that long
	// (DefaultStallTimeout when 0).
	Downloads    int
	DownloadWait time.Duration
	StallTimeout time.Duration
}

// ref is what the index holds of a key.
type ref struct {
	digest    string
	size      int64
	fetchedAt time.Time
	usedAt    time.Time
}

// Cache is the boot-asset cache. It is safe for concurrent use.
type Cache struct {
	opts    Options
	factory *url.URL
	blobDir string
	logger  *zap.Logger
	metrics *metrics

	// ctx is the downloads': they outlive the callers that started them, not the cache.
	ctx    context.Context //nolint:containedctx // the downloads' lifetime is the cache's
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// persistMu orders the index writes.
	persistMu sync.Mutex

	// slots holds a token per download under way (limits.go).
	slots chan struct{}

	mu   sync.Mutex
	refs map[Key]ref
	// verified are the blobs whose content was checked since the cache opened, by digest.
	verified map[string]stamp
	// pins are the files Open handed out, by digest: their blobs stay while one is open.
	pins    map[string][]*os.File
	flights map[Key]*flight
	// reserved is the bytes the downloads under way may write to their temporary files:
	// counted with the blobs against MaxBytes (limits.go).
	reserved int64
	closed   bool
	// flush writes the index once uses have waited persistInterval; nil when none wait.
	flush *time.Timer
}

// New opens the cache in opts.Dir, loading what an earlier run left there. Index entries
// whose blob is missing or has another size are dropped, blobs nothing refers to removed.
func New(opts Options) (*Cache, error) {
	if opts.Dir == "" {
		return nil, errors.New("the image cache needs a directory")
	}

	if opts.MaxBytes < 0 || opts.MaxDownload < 0 || opts.FetchTimeout < 0 || opts.Downloads < 0 || opts.DownloadWait < 0 || opts.StallTimeout < 0 {
		return nil, errors.New("the image cache's size and download bounds must not be negative")
	}

	factory, err := url.Parse(opts.FactoryBaseURL)
	if err != nil || (factory.Scheme != "http" && factory.Scheme != "https") || factory.Host == "" {
		return nil, fmt.Errorf("invalid image factory base URL %q: want http(s)://host[:port][/path]", redactURL(opts.FactoryBaseURL))
	}

	if opts.MaxBytes == 0 {
		opts.MaxBytes = DefaultMaxBytes
	}

	if opts.MaxDownload == 0 {
		opts.MaxDownload = DefaultMaxDownload
	}

	if opts.FetchTimeout == 0 {
		opts.FetchTimeout = DefaultFetchTimeout
	}

	opts.Downloads = cmp.Or(opts.Downloads, DefaultDownloads)
	opts.DownloadWait = cmp.Or(opts.DownloadWait, DefaultDownloadWait)
	opts.StallTimeout = cmp.Or(opts.StallTimeout, DefaultStallTimeout)

	if opts.Client == nil {
		opts.Client = defaultClient()
	}

	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}

	ctx, cancel := context.WithCancel(context.Background())

	c := &Cache{
		opts:     opts,
		factory:  factory,
		blobDir:  filepath.Join(opts.Dir, "blobs", "sha256"),
		logger:   opts.Logger,
		ctx:      ctx,
		cancel:   cancel,
		refs:     map[Key]ref{},
		verified: map[string]stamp{},
		pins:     map[string][]*os.File{},
		flights:  map[Key]*flight{},
		slots:    make(chan struct{}, opts.Downloads),
	}

	c.metrics = newMetrics(c.totalBytes)

	if err := c.load(); err != nil {
		cancel()

		return nil, err
	}

	if opts.Registry != nil {
		if err := c.metrics.register(opts.Registry); err != nil {
			cancel()

			return nil, fmt.Errorf("error registering the image cache's metrics: %w", err)
		}
	}

	return c, nil
}

// defaultClient gives the factory a minute to start answering; the download's own time
// is bounded by FetchTimeout.
func defaultClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone() //nolint:forcetypeassert // the standard library's own type
	t.ResponseHeaderTimeout = time.Minute

	return &http.Client{Transport: t}
}

// Get returns the blob of k: from the cache when it is there and its content checks
// out, else downloaded from the factory. Concurrent callers for one key share one
// download; a caller whose ctx ends stops waiting, the download goes on for the others.
func (c *Cache) Get(ctx context.Context, k Key) (Blob, error) {
	if err := k.Validate(); err != nil {
		return Blob{}, err
	}

	if b, ok := c.hit(k); ok {
		c.metrics.hits.Inc()

		return b, nil
	}

	f, err := c.join(k)
	if err != nil {
		return Blob{}, err
	}

	select {
	case <-f.done:
	case <-ctx.Done():
		return Blob{}, fmt.Errorf("error waiting for boot asset %s: %w", k, context.Cause(ctx))
	}

	if f.err != nil {
		return Blob{}, f.err
	}

	if f.downloaded {
		c.metrics.misses.Inc()
	} else {
		c.metrics.hits.Inc()
	}

	return f.blob, nil
}

// Pull is Get, for anvilctl's cache pull: it fetches k unless it is cached.
func (c *Cache) Pull(ctx context.Context, k Key) (Blob, error) { return c.Get(ctx, k) }

// Open returns the blob of k opened for serving (http.ServeContent with the file sends
// it with sendfile). The blob is never evicted or pruned while the file is open: the
// caller closes it.
func (c *Cache) Open(ctx context.Context, k Key) (*os.File, Blob, error) {
	// The blob may go between Get and the open (evicted, pruned, deleted by hand): a
	// second Get fetches it again.
	for range 3 {
		b, err := c.Get(ctx, k)
		if err != nil {
			return nil, Blob{}, err
		}

		f, err := c.openPinned(b)
		if errors.Is(err, errGone) {
			continue
		}

		if err != nil {
			return nil, Blob{}, err
		}

		return f, b, nil
	}

	return nil, Blob{}, fmt.Errorf("error opening boot asset %s: it kept disappearing from the cache", k)
}

// errGone says a blob went between Get and its opening.
var errGone = errors.New("boot asset gone from the cache")

// openPinned opens b's file and pins it, unless the key no longer holds it (errGone).
func (c *Cache) openPinned(b Blob) (*os.File, error) {
	c.mu.Lock()
	defer c.mu.Unlock()

	if r, ok := c.refs[b.Key]; !ok || r.digest != b.Digest {
		return nil, errGone
	}

	f, err := os.Open(b.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, errGone
	}

	if err != nil {
		return nil, fmt.Errorf("error opening boot asset %s: %w", b.Key, err)
	}

	c.pins[b.Digest] = append(slices.DeleteFunc(c.pins[b.Digest], closed), f)

	return f, nil
}

// List returns every cached asset, by schematic, version and file.
func (c *Cache) List() []Blob {
	c.mu.Lock()
	defer c.mu.Unlock()

	out := make([]Blob, 0, len(c.refs))
	for k, r := range c.refs {
		out = append(out, c.blob(k, r))
	}

	sortBlobs(out)

	return out
}

// Prune removes the cached assets keep does not want (all when keep is nil), except
// those being served, and deletes the blobs nothing refers to any more. keep is called
// without the cache's lock held.
func (c *Cache) Prune(ctx context.Context, keep func(Key) bool) ([]Blob, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("error pruning the image cache: %w", err)
	}

	var candidates []Blob

	for _, b := range c.List() {
		if keep == nil || !keep(b.Key) {
			candidates = append(candidates, b)
		}
	}

	c.mu.Lock()

	var removed []Blob

	for _, b := range candidates {
		// A key fetched again since the listing holds something else now.
		if r, ok := c.refs[b.Key]; !ok || r.digest != b.Digest || c.pinned(b.Digest) {
			continue
		}

		delete(c.refs, b.Key)
		removed = append(removed, b)
	}

	var errs []error

	for _, b := range removed {
		if err := c.removeBlobIfUnused(b.Digest); err != nil {
			errs = append(errs, err)
		}
	}

	c.mu.Unlock()

	if len(removed) > 0 {
		c.logger.Info("pruned the image cache", zap.Int("removed", len(removed)))

		if err := c.persist(); err != nil {
			errs = append(errs, err)
		}
	}

	sortBlobs(removed)

	return removed, errors.Join(errs...)
}

// Close stops the downloads in flight and writes the index.
func (c *Cache) Close() error {
	c.mu.Lock()
	c.closed = true

	if c.flush != nil {
		c.flush.Stop()
		c.flush = nil
	}

	c.mu.Unlock()

	c.cancel()
	c.wg.Wait()

	return c.persist()
}
