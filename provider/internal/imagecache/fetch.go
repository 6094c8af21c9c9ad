package imagecache

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"go.uber.org/zap"
)

// ErrFactoryUnreachable is wrapped by the error of an asset that is not cached and could
// not be fetched because the factory was not reached (or broke off the download).
var ErrFactoryUnreachable = errors.New("the image factory could not be reached")

// tempPrefix names the files of downloads under way; New removes those a crash left.
const tempPrefix = ".download-"

const digestPrefix = "sha256:"

// FactoryStatusError is the factory's answer when it is not the asset.
type FactoryStatusError struct {
	Key Key
	// Factory is the factory's base URL, without credentials.
	Factory string
	Status  int
	// Message is the start of the factory's answer.
	Message string
}

func (e *FactoryStatusError) Error() string {
	msg := fmt.Sprintf("the image factory at %s answered %d %s for boot asset %s", e.Factory, e.Status, http.StatusText(e.Status), e.Key)
	if e.Message != "" {
		msg += ": " + e.Message
	}

	return msg
}

// download fetches k from the factory into a blob, records it and evicts what no longer
// fits.
func (c *Cache) download(k Key) (Blob, error) {
	release, err := c.turn(k)
	if err != nil {
		c.metrics.downloads.WithLabelValues("error").Inc()

		return Blob{}, err
	}

	defer release()

	ctx, cancelTimeout := context.WithTimeoutCause(c.ctx, c.opts.FetchTimeout, fmt.Errorf("the download took longer than %s", c.opts.FetchTimeout))
	defer cancelTimeout()

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	start := time.Now()

	got, err := c.fetch(ctx, cancel, k)
	if err != nil {
		c.metrics.downloads.WithLabelValues("error").Inc()

		if c.ctx.Err() != nil {
			return Blob{}, fmt.Errorf("error fetching boot asset %s: %w", k, ErrClosed)
		}

		return Blob{}, err
	}

	tmp, digest, size := got.tmp, got.digest, got.size

	defer os.Remove(tmp) // a no-op once renamed

	c.mu.Lock()

	// The temporary file becomes the blob: counted as one from here on.
	c.reserved -= got.reserved

	path := c.blobPath(digest)

	if err := os.Rename(tmp, path); err != nil {
		c.mu.Unlock()

		return Blob{}, fmt.Errorf("error storing boot asset %s: %w", k, err)
	}

	fi, err := os.Stat(path)
	if err != nil {
		c.mu.Unlock()

		return Blob{}, fmt.Errorf("error storing boot asset %s: %w", k, err)
	}

	now := time.Now()
	c.verified[digest] = stamp{size: fi.Size(), mtime: fi.ModTime()}
	c.refs[k] = ref{digest: digest, size: size, fetchedAt: now, usedAt: now}
	b := c.blob(k, c.refs[k])
	evicted := c.evict(digest, c.reserved)

	c.mu.Unlock()

	c.metrics.downloads.WithLabelValues("ok").Inc()
	c.metrics.bytes.Add(float64(size))
	c.logger.Info("fetched boot asset from the image factory", zap.Stringer("key", k), zap.String("digest", digest),
		zap.Int64("size", size), zap.Duration("duration", time.Since(start)), zap.Int("evicted", len(evicted)))

	// The asset is cached and served whatever becomes of the index: a lost entry costs a
	// download after a restart, nothing more.
	if err := c.persist(); err != nil {
		c.logger.Warn("error writing the image cache index", zap.Error(err))
	}

	return b, nil
}

// fetched is a download's temporary file: its name, digest and size, and the bytes
// reserved for it against MaxBytes.
type fetched struct {
	tmp, digest    string
	size, reserved int64
}

// fetch downloads k into a temporary file in the cache's directory, hashing it on the
// way. The file's bytes are reserved against MaxBytes before it is written: on success
// the caller gives the reservation back as the file becomes a blob.
func (c *Cache) fetch(ctx context.Context, cancel context.CancelCauseFunc, k Key) (fetched, error) {
	u := c.factory.JoinPath("image", k.Schematic, k.Version, k.File)
	factory := c.factory.Redacted()

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return fetched{}, fmt.Errorf("error building the request for boot asset %s: %w", k, err)
	}

	req.Header.Set("User-Agent", "anvil-provider")

	// From the request on: a factory that accepts the connection and never answers
	// stalls the download as one that stops sending does.
	guard := newStallGuard(c.opts.StallTimeout, cancel)
	defer guard.timer.Stop()

	resp, err := c.opts.Client.Do(req)
	if err != nil {
		return fetched{}, fmt.Errorf("boot asset %s is not cached and %w at %s: %w", k, ErrFactoryUnreachable, factory, reason(ctx, err))
	}

	defer resp.Body.Close()

	guard.r = resp.Body

	if resp.StatusCode != http.StatusOK {
		return fetched{}, &FactoryStatusError{Key: k, Factory: factory, Status: resp.StatusCode, Message: excerpt(resp.Body)}
	}

	// An asset larger than the whole cache cannot be kept in it.
	limit := min(c.opts.MaxDownload, c.opts.MaxBytes)
	if resp.ContentLength > limit {
		return fetched{}, fmt.Errorf("boot asset %s from the image factory is %d bytes, more than the %d allowed", k, resp.ContentLength, limit)
	}

	// Its announced size, or without one as much as it may be.
	reserved := resp.ContentLength
	if reserved < 0 {
		reserved = limit
	}

	if err = c.reserve(k, reserved); err != nil {
		return fetched{}, err
	}

	tmp, err := os.CreateTemp(c.opts.Dir, tempPrefix+"*")
	if err != nil {
		c.unreserve(reserved)

		return fetched{}, fmt.Errorf("error creating a file for boot asset %s: %w", k, err)
	}

	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), io.LimitReader(guard, limit+1))

	if err == nil && n > limit {
		err = fmt.Errorf("boot asset %s from the image factory is more than the %d bytes allowed", k, limit)
	} else if err != nil {
		err = fmt.Errorf("error downloading boot asset %s after %d bytes (%w at %s): %w", k, n, ErrFactoryUnreachable, factory, reason(ctx, err))
	}

	// Synced before it is renamed into place: the index may name it before a power loss.
	if err == nil {
		if err = tmp.Sync(); err != nil {
			err = fmt.Errorf("error writing boot asset %s: %w", k, err)
		}
	}

	if cerr := tmp.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("error writing boot asset %s: %w", k, cerr)
	}

	if err != nil {
		os.Remove(tmp.Name())
		c.unreserve(reserved)

		return fetched{}, err
	}

	return fetched{tmp: tmp.Name(), digest: digestPrefix + hex.EncodeToString(h.Sum(nil)), size: n, reserved: reserved}, nil
}

// hashFile returns the digest of a file's content.
func hashFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err //nolint:wrapcheck // the caller says what it was checking
	}

	defer f.Close()

	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("error reading %s: %w", path, err)
	}

	return digestPrefix + hex.EncodeToString(h.Sum(nil)), nil
}

// excerpt is the start of an error answer, on one line.
func excerpt(r io.Reader) string {
	b, _ := io.ReadAll(io.LimitReader(r, 200))

	return strings.Join(strings.Fields(strings.ToValidUTF8(string(b), "?")), " ")
}

// reason is why a download failed: the cause of its context's end (a timeout, a stall),
// else the client's error without the *url.Error around it, as the message names the
// factory and the key already.
func reason(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}

	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}

	return err
}

// redactURL hides the password of a URL that may carry one.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "<unparsable URL>"
	}

	return u.Redacted()
}

// stallGuard cancels a download when nothing arrives for its timeout: no answer to the
// request, or no byte of the body (r, set once the answer came).
type stallGuard struct {
	r       io.Reader
	timer   *time.Timer
	timeout time.Duration
}

func newStallGuard(timeout time.Duration, cancel context.CancelCauseFunc) *stallGuard {
	return &stallGuard{timeout: timeout, timer: time.AfterFunc(timeout, func() {
		cancel(fmt.Errorf("no data arrived for %s", timeout))
	})}
}

func (g *stallGuard) Read(p []byte) (int, error) {
	n, err := g.r.Read(p)
	if n > 0 {
		g.timer.Reset(g.timeout)
	}

	return n, err //nolint:wrapcheck // io.Reader's own errors, io.EOF among them
}
