package imagecache

import (
	"errors"
	"fmt"
	"time"
)

// ErrBusy is wrapped by the error of a download that waited Options.DownloadWait for its
// turn in vain: as many as Options.Downloads were under way all that time.
var ErrBusy = errors.New("the image cache has as many downloads under way as it allows")

// ErrFull is wrapped by the error of a download the cache has no room for: with the
// blobs being served and the downloads under way, its size is more than MaxBytes.
var ErrFull = errors.New("the image cache has no room for the boot asset")

// turn waits for one of the download slots; the function it returns gives it back.
func (c *Cache) turn(k Key) (func(), error) {
	release := func() { <-c.slots }

	select {
	case c.slots <- struct{}{}:
		return release, nil
	default:
	}

	timer := time.NewTimer(c.opts.DownloadWait)
	defer timer.Stop()

	select {
	case c.slots <- struct{}{}:
		return release, nil
	case <-timer.C:
		return nil, fmt.Errorf("boot asset %s waited %s for its download: %w", k, c.opts.DownloadWait, ErrBusy)
	case <-c.ctx.Done():
		return nil, fmt.Errorf("error fetching boot asset %s: %w", k, ErrClosed)
	}
}

// reserve counts n bytes of a download's temporary file against MaxBytes, evicting the
// least recently used blobs to make room for them; ErrFull when what is left (blobs being
// served, other downloads) leaves none.
func (c *Cache) reserve(k Key, n int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()

	c.evict("", c.reserved+n)

	if used := c.total() + c.reserved; used+n > c.opts.MaxBytes {
		return fmt.Errorf("boot asset %s (%d bytes) does not fit: %d of the cache's %d bytes are being served or downloaded: %w",
			k, n, used, c.opts.MaxBytes, ErrFull)
	}

	c.reserved += n

	return nil
}

// unreserve gives a reservation back.
func (c *Cache) unreserve(n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()

	c.reserved -= n
}
