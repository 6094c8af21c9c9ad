package imagecache

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"go.uber.org/zap"
)

// flight is the one fetch (or check) of a key that every concurrent caller waits for.
type flight struct {
	done       chan struct{}
	blob       Blob
	downloaded bool
	err        error
}

// stamp is how a blob file looked when its content was last checked.
type stamp struct {
	size  int64
	mtime time.Time
}

func (s stamp) matches(fi fs.FileInfo) bool {
	return fi.Size() == s.size && fi.ModTime().Equal(s.mtime)
}

// hit returns k's blob when it is cached and was checked in this run, its file
// unchanged since, and records the use.
func (c *Cache) hit(k Key) (Blob, bool) {
	c.mu.Lock()
	r, ok := c.refs[k]
	st, verified := c.verified[r.digest]
	closed := c.closed
	c.mu.Unlock()

	if !ok || !verified || closed {
		return Blob{}, false
	}

	// Stat outside the lock: it is the one system call of every hit.
	fi, err := os.Stat(c.blobPath(r.digest))
	if err != nil || !st.matches(fi) {
		return Blob{}, false
	}

	c.mu.Lock()
	defer c.mu.Unlock()

	cur, ok := c.refs[k]
	if !ok || cur.digest != r.digest {
		return Blob{}, false
	}

	cur.usedAt = time.Now()
	c.refs[k] = cur
	c.used()

	return c.blob(k, cur), true
}

// join returns k's flight, starting it unless one is under way.
func (c *Cache) join(k Key) (*flight, error) {
	c.mu.Lock()
	defer c.mu.Unlock()

	if c.closed {
		return nil, ErrClosed
	}

	if f, ok := c.flights[k]; ok {
		return f, nil
	}

	f := &flight{done: make(chan struct{})}
	c.flights[k] = f
	c.wg.Add(1)

	go func() {
		defer c.wg.Done()

		f.blob, f.downloaded, f.err = c.ensure(k)

		// Gone from the map before anyone is told: a later Get finds the blob cached or
		// starts a flight of its own.
		c.mu.Lock()
		delete(c.flights, k)
		c.mu.Unlock()

		close(f.done)
	}()

	return f, nil
}

// ensure makes k cached and checked: an entry is checked (its sha256) and, missing or
// corrupt, downloaded again.
func (c *Cache) ensure(k Key) (Blob, bool, error) {
	// A flight that just ended may have done the work.
	if b, ok := c.hit(k); ok {
		return b, false, nil
	}

	c.mu.Lock()
	r, ok := c.refs[k]
	c.mu.Unlock()

	if ok {
		if b, ok := c.verify(k, r); ok {
			return b, false, nil
		}
	}

	b, err := c.download(k)

	return b, err == nil, err
}

// verify checks the content of k's blob against its digest. A mismatch (or an unreadable
// blob) deletes the blob and every entry referring to it, so that it is fetched again.
func (c *Cache) verify(k Key, r ref) (Blob, bool) {
	path := c.blobPath(r.digest)

	// The stamp is taken before hashing: a change while hashing shows at the next use.
	fi, err := os.Stat(path)
	if err == nil {
		var digest string

		digest, err = hashFile(path)
		if err == nil && (digest != r.digest || fi.Size() != r.size) {
			err = fmt.Errorf("content is %s, %d bytes: want %s, %d bytes", digest, fi.Size(), r.digest, r.size)
		}
	}

	c.mu.Lock()
	defer c.mu.Unlock()

	if cur, ok := c.refs[k]; !ok || cur.digest != r.digest {
		return Blob{}, false // changed meanwhile (pruned, evicted): fetch it
	}

	switch {
	case err == nil:
		c.verified[r.digest] = stamp{size: fi.Size(), mtime: fi.ModTime()}
		r.usedAt = time.Now()
		c.refs[k] = r
		c.used()

		return c.blob(k, r), true
	case errors.Is(err, fs.ErrNotExist):
		c.logger.Info("cached boot asset is missing: fetching it again", zap.Stringer("key", k), zap.String("digest", r.digest))
	default:
		c.metrics.corrupt.Inc()
		c.logger.Warn("cached boot asset is corrupt: deleting it and fetching it again",
			zap.Stringer("key", k), zap.String("path", path), zap.Error(err))
	}

	c.dropDigest(r.digest)

	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		c.logger.Warn("error deleting a corrupt boot asset", zap.String("path", path), zap.Error(err))
	}

	return Blob{}, false
}
