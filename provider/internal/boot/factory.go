package boot

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/anvil-metal/anvil/provider/internal/imagecache"
)

// Without a Cache (--image-cache-size 0) a machine boots Talos' kernel and initramfs
// straight from the Image Factory's PXE endpoint. The factory's own PXE script cannot
// take the boot's arguments (bootArgs), so the provider renders the boot itself: it
// fetches the factory's cmdline for the schematic, keeps it in memory, and puts the boot's
// arguments after it.

const (
	// factoryCmdlineWait bounds a fetch of the factory's cmdline, a registration of the
	// schematic and a second fetch included: within scriptWait, so that iPXE gets an
	// answer (one that retries, at worst) before it gives up on the script.
	factoryCmdlineWait = 15 * time.Second
	// maxFactoryCmdlines bounds the cmdlines kept in memory, the oldest dropped first:
	// one per schematic, version, platform and architecture booted.
	maxFactoryCmdlines = 256
)

// defaultFactoryClient fetches cmdlines when Scripts.HTTPClient is nil.
var defaultFactoryClient = &http.Client{Timeout: factoryCmdlineWait}

// factoryKernel is img booted from the Image Factory's PXE endpoint: its kernel and
// initramfs there, and the factory's cmdline for its schematic, fetched by the provider.
func (s *Scripts) factoryKernel(ctx context.Context, img talosImage, arch string) (talosKernel, error) {
	files, err := imagecache.FilesFor(arch)
	if err != nil {
		return talosKernel{}, err
	}

	// The names go into the script's lines as they are: refuse what the factory could not
	// serve (and what could break a line) before anything is fetched.
	if err := (imagecache.Key{Schematic: img.schematic, Version: img.version, File: files.Kernel}).Validate(); err != nil {
		return talosKernel{}, err
	}

	cmdline, err := s.factoryCmdline(ctx, img, arch)
	if err != nil {
		return talosKernel{}, err
	}

	image := s.FactoryPXEBaseURL + "/image/" + img.schematic + "/" + img.version + "/"

	return talosKernel{kernelURL: image + files.Kernel, initramfs: files.Initramfs, initramfsURL: image + files.Initramfs, cmdline: cmdline}, nil
}

// cmdlineKey names one of the factory's cmdlines.
type cmdlineKey struct {
	schematic, version, platform, arch string
}

// path is the cmdline's path on the factory.
func (k cmdlineKey) path() string {
	return "/image/" + k.schematic + "/" + k.version + "/cmdline-" + k.platform + "-" + k.arch
}

// cmdlineFetch is one fetch of a cmdline from the factory: whoever asks for the same one
// while it runs waits for it.
type cmdlineFetch struct {
	done    chan struct{}
	cmdline string
	err     error
}

// factoryCmdlines keeps the cmdlines fetched from the factory, each fetched once however
// many machines boot it at the same time (a PXE storm costs the factory one request); a
// failed fetch is forgotten, so the next boot tries again. The zero value is ready.
type factoryCmdlines struct {
	mu      sync.Mutex
	fetches map[cmdlineKey]*cmdlineFetch
	// kept are the keys of the fetched cmdlines, oldest first.
	kept []cmdlineKey
}

// factoryCmdline returns the factory's cmdline for img's schematic and version, on the
// provider's platform, for arch: from memory, or fetched (within factoryCmdlineWait,
// whatever becomes of ctx, so that those waiting for the same fetch are not failed by one
// machine going away). A factory that does not know the schematic has it registered
// (img.register), then is asked again.
func (s *Scripts) factoryCmdline(ctx context.Context, img talosImage, arch string) (string, error) {
	k := cmdlineKey{schematic: img.schematic, version: img.version, platform: s.Platform, arch: arch}
	c := &s.cmdlines

	c.mu.Lock()

	f, ok := c.fetches[k]
	if !ok {
		if c.fetches == nil {
			c.fetches = map[cmdlineKey]*cmdlineFetch{}
		}

		f = &cmdlineFetch{done: make(chan struct{})}
		c.fetches[k] = f

		go s.fetchFactoryCmdline(context.WithoutCancel(ctx), k, f, img.register)
	}

	c.mu.Unlock()

	select {
	case <-f.done:
		return f.cmdline, f.err
	case <-ctx.Done():
		return "", fmt.Errorf("waiting for the Image Factory's cmdline: %w", context.Cause(ctx))
	}
}

// fetchFactoryCmdline runs fetch f of k, then keeps its cmdline or forgets the failure.
func (s *Scripts) fetchFactoryCmdline(ctx context.Context, k cmdlineKey, f *cmdlineFetch, register func(context.Context) error) {
	ctx, cancel := context.WithTimeoutCause(ctx, factoryCmdlineWait, fmt.Errorf("the Image Factory did not answer within %s", factoryCmdlineWait))
	defer cancel()

	f.cmdline, f.err = s.getFactoryCmdline(ctx, k)

	if f.err != nil && register != nil && unknownToFactory(f.err) {
		// Right after the allocation, the schematic controller may not have registered
		// the schematic yet: register it here and ask again, once.
		if err := register(ctx); err != nil {
			f.err = fmt.Errorf("%w (registering the schematic: %w)", f.err, err)
		} else {
			f.cmdline, f.err = s.getFactoryCmdline(ctx, k)
		}
	}

	c := &s.cmdlines

	c.mu.Lock()
	defer c.mu.Unlock()

	close(f.done)

	if f.err != nil {
		if c.fetches[k] == f {
			delete(c.fetches, k)
		}

		return
	}

	c.kept = append(c.kept, k)

	for len(c.kept) > maxFactoryCmdlines {
		delete(c.fetches, c.kept[0])
		c.kept = c.kept[1:]
	}
}

// getFactoryCmdline GETs k from the factory's PXE endpoint, bounded and checked as a
// cached one is (parseCmdline). A status other than 200 is an
// imagecache.FactoryStatusError, as the cache's are.
func (s *Scripts) getFactoryCmdline(ctx context.Context, k cmdlineKey) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.FactoryPXEBaseURL+k.path(), nil)
	if err != nil {
		return "", fmt.Errorf("error building the request for the Image Factory's cmdline: %w", err)
	}

	req.Header.Set("User-Agent", "anvil-provider")

	client := s.HTTPClient
	if client == nil {
		client = defaultFactoryClient
	}

	key := imagecache.Key{Schematic: k.schematic, Version: k.version, File: "cmdline-" + k.platform + "-" + k.arch}
	factory := strings.TrimSuffix(req.URL.Redacted(), k.path())

	resp, err := client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			err = context.Cause(ctx)
		}

		return "", fmt.Errorf("error fetching the cmdline %s from the Image Factory at %s: %w", key, factory, err)
	}

	defer resp.Body.Close()

	if resp.StatusCode != http.StatusOK {
		return "", &imagecache.FactoryStatusError{Key: key, Factory: factory, Status: resp.StatusCode}
	}

	b, err := io.ReadAll(io.LimitReader(resp.Body, maxCmdline+1))
	if err != nil {
		return "", fmt.Errorf("error reading the Image Factory's cmdline %s: %w", key, err)
	}

	cmdline, err := parseCmdline(b)
	if err != nil {
		return "", fmt.Errorf("refusing the Image Factory's cmdline %s: %w", key, err)
	}

	return cmdline, nil
}
