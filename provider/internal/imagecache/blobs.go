package imagecache

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"
)

// used records that an entry's use time changed: the index is written within
// persistInterval. Called with mu held.
func (c *Cache) used() {
	if c.flush != nil || c.closed {
		return
	}

	c.flush = time.AfterFunc(persistInterval, func() {
		c.mu.Lock()
		c.flush = nil
		c.mu.Unlock()

		if err := c.persist(); err != nil {
			c.logger.Warn("error writing the image cache index", zap.Error(err))
		}
	})
}

// dropDigest forgets every entry referring to digest. Called with mu held.
func (c *Cache) dropDigest(digest string) {
	for k, r := range c.refs {
		if r.digest == digest {
			delete(c.refs, k)
		}
	}

	delete(c.verified, digest)
}

// removeBlobIfUnused deletes digest's file unless an entry refers to it or it is open.
// Called with mu held.
func (c *Cache) removeBlobIfUnused(digest string) error {
	for _, r := range c.refs {
		if r.digest == digest {
			return nil
		}
	}

	if c.pinned(digest) {
		return nil
	}

	delete(c.verified, digest)
	delete(c.pins, digest)

	if err := os.Remove(c.blobPath(digest)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("error deleting blob %s: %w", digest, err)
	}

	return nil
}

// pinned reports whether a file of digest handed out by Open is still open, forgetting
// the closed ones. Called with mu held.
func (c *Cache) pinned(digest string) bool {
	files := slices.DeleteFunc(c.pins[digest], closed)
	if len(files) == 0 {
		delete(c.pins, digest)

		return false
	}

	c.pins[digest] = files

	return true
}

// closed reports whether f was closed: the caller of Open owns it and never tells.
func closed(f *os.File) bool {
	rc, err := f.SyscallConn()
	if err != nil {
		return true
	}

	return rc.Control(func(uintptr) {}) != nil
}

// blob is k's entry as a Blob. Called with mu held.
func (c *Cache) blob(k Key, r ref) Blob {
	return Blob{Key: k, Digest: r.digest, Size: r.size, Path: c.blobPath(r.digest), FetchedAt: r.fetchedAt, UsedAt: r.usedAt}
}

func (c *Cache) blobPath(digest string) string {
	return filepath.Join(c.blobDir, strings.TrimPrefix(digest, digestPrefix))
}

// totalBytes is the size of the blobs, each counted once however many keys hold it.
func (c *Cache) totalBytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()

	return c.total()
}

// total is totalBytes with mu held.
func (c *Cache) total() int64 {
	seen := map[string]bool{}

	var n int64

	for _, r := range c.refs {
		if !seen[r.digest] {
			seen[r.digest] = true
			n += r.size
		}
	}

	return n
}

func sortBlobs(bs []Blob) {
	slices.SortFunc(bs, func(a, b Blob) int {
		return strings.Compare(a.Key.Schematic+"/"+a.Key.Version+"/"+a.Key.File, b.Key.Schematic+"/"+b.Key.Version+"/"+b.Key.File)
	})
}

// evict deletes the least recently used blobs until the cache fits in MaxBytes with room
// bytes to spare (the downloads' temporary files), never keep (the blob just fetched)
// nor one being served, and returns the entries dropped. Called with mu held.
func (c *Cache) evict(keep string, room int64) []Blob {
	total := c.total()
	if total+room <= c.opts.MaxBytes {
		return nil
	}

	// A blob's last use is its most recent key's.
	lastUse := map[string]time.Time{}
	for _, r := range c.refs {
		if r.usedAt.After(lastUse[r.digest]) || lastUse[r.digest].IsZero() {
			lastUse[r.digest] = r.usedAt
		}
	}

	digests := make([]string, 0, len(lastUse))
	for d := range lastUse {
		digests = append(digests, d)
	}

	slices.SortFunc(digests, func(a, b string) int { return lastUse[a].Compare(lastUse[b]) })

	var evicted []Blob

	for _, d := range digests {
		if total+room <= c.opts.MaxBytes {
			break
		}

		if d == keep || c.pinned(d) {
			continue
		}

		var size int64

		for k, r := range c.refs {
			if r.digest == d {
				evicted = append(evicted, c.blob(k, r))
				size = r.size
			}
		}

		c.dropDigest(d)

		if err := c.removeBlobIfUnused(d); err != nil {
			c.logger.Warn("error evicting a boot asset", zap.Error(err))
		}

		total -= size

		c.metrics.evictions.Inc()
		c.logger.Info("evicted boot asset from the image cache", zap.String("digest", d), zap.Int64("size", size))
	}

	// A reservation (no keep) that does not fit is refused by the caller instead.
	if keep != "" && total+room > c.opts.MaxBytes {
		c.logger.Warn("image cache over its size: the rest is being fetched or served",
			zap.Int64("bytes", total), zap.Int64("downloading", room), zap.Int64("max_bytes", c.opts.MaxBytes))
	}

	return evicted
}
