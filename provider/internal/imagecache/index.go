package imagecache

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"
)

// indexName is the index file in the cache's directory.
const indexName = "index.json"

// indexVersion is the index's format; another one is not read (the blobs are fetched
// again).
const indexVersion = 1

var digestRe = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// indexFile is the index as stored: which blob each key holds, and when it was fetched
// and last used.
type indexFile struct {
	Version int          `json:"version"`
	Entries []indexEntry `json:"entries"`
}

type indexEntry struct {
	Schematic string    `json:"schematic"`
	Version   string    `json:"version"`
	File      string    `json:"file"`
	Digest    string    `json:"digest"`
	Size      int64     `json:"size"`
	FetchedAt time.Time `json:"fetchedAt"`
	UsedAt    time.Time `json:"usedAt"`
}

// load creates the cache's directories and reads what an earlier run left: the index's
// entries whose blob is there with its size, the blobs one of them refers to. Contents
// are checked on first use, not here: a start does not read gigabytes.
func (c *Cache) load() error {
	if err := os.MkdirAll(c.blobDir, 0o700); err != nil {
		return fmt.Errorf("error creating the image cache directory: %w", err)
	}

	// Downloads a crash cut short.
	if err := removeMatching(c.opts.Dir, func(name string) bool {
		return strings.HasPrefix(name, tempPrefix) || strings.HasPrefix(name, indexTempPrefix)
	}); err != nil {
		return err
	}

	idx, idxErr := readIndex(filepath.Join(c.opts.Dir, indexName))
	if idxErr != nil {
		// The blobs can be fetched again: a broken index must not keep the provider down.
		c.logger.Warn("ignoring the image cache index: its blobs are deleted and fetched again when asked for", zap.Error(idxErr))
	}

	dropped := 0

	for _, e := range idx.Entries {
		k := Key{Schematic: e.Schematic, Version: e.Version, File: e.File}
		if k.Validate() != nil || !digestRe.MatchString(e.Digest) {
			dropped++

			continue
		}

		fi, err := os.Stat(c.blobPath(e.Digest))
		if err != nil || !fi.Mode().IsRegular() || fi.Size() != e.Size {
			c.logger.Info("dropping image cache entry: its blob is missing or has another size", zap.Stringer("key", k), zap.String("digest", e.Digest))

			dropped++

			continue
		}

		c.refs[k] = ref{digest: e.Digest, size: e.Size, fetchedAt: e.FetchedAt, usedAt: e.UsedAt}
	}

	referenced := map[string]bool{}
	for _, r := range c.refs {
		referenced[strings.TrimPrefix(r.digest, digestPrefix)] = true
	}

	if err := removeMatching(c.blobDir, func(name string) bool { return !referenced[name] }); err != nil {
		return err
	}

	evicted := c.evict("", 0)

	if dropped > 0 || len(evicted) > 0 || idxErr != nil {
		if err := c.persist(); err != nil {
			return err
		}
	}

	c.logger.Info("image cache loaded", zap.String("dir", c.opts.Dir), zap.Int("entries", len(c.refs)),
		zap.Int64("bytes", c.total()), zap.Int64("max_bytes", c.opts.MaxBytes))

	return nil
}

// readIndex reads the index; a missing one is empty.
func readIndex(path string) (indexFile, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return indexFile{Version: indexVersion}, nil
	}

	if err != nil {
		return indexFile{}, fmt.Errorf("error reading %s: %w", path, err)
	}

	var idx indexFile
	if err := json.Unmarshal(b, &idx); err != nil {
		return indexFile{}, fmt.Errorf("error decoding %s: %w", path, err)
	}

	if idx.Version != indexVersion {
		return indexFile{}, fmt.Errorf("%s has format version %d, not %d", path, idx.Version, indexVersion)
	}

	return idx, nil
}

// indexTempPrefix names an index being written.
const indexTempPrefix = ".index-"

// persist writes the index atomically: a temporary file, synced, renamed over the old.
func (c *Cache) persist() error {
	c.persistMu.Lock()
	defer c.persistMu.Unlock()

	c.mu.Lock()

	idx := indexFile{Version: indexVersion, Entries: make([]indexEntry, 0, len(c.refs))}
	for k, r := range c.refs {
		idx.Entries = append(idx.Entries, indexEntry{
			Schematic: k.Schematic, Version: k.Version, File: k.File,
			Digest: r.digest, Size: r.size, FetchedAt: r.fetchedAt, UsedAt: r.usedAt,
		})
	}

	c.mu.Unlock()

	slices.SortFunc(idx.Entries, func(a, b indexEntry) int {
		return strings.Compare(a.Schematic+a.Version+a.File, b.Schematic+b.Version+b.File)
	})

	b, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return fmt.Errorf("error encoding the image cache index: %w", err)
	}

	tmp, err := os.CreateTemp(c.opts.Dir, indexTempPrefix+"*")
	if err != nil {
		return fmt.Errorf("error writing the image cache index: %w", err)
	}

	defer os.Remove(tmp.Name())

	_, err = tmp.Write(b)
	if err == nil {
		err = tmp.Sync()
	}

	if cerr := tmp.Close(); err == nil {
		err = cerr
	}

	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(c.opts.Dir, indexName))
	}

	if err != nil {
		return fmt.Errorf("error writing the image cache index: %w", err)
	}

	return nil
}

// removeMatching deletes the regular files of dir whose name matches.
func removeMatching(dir string, match func(name string) bool) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("error reading the image cache directory: %w", err)
	}

	for _, e := range entries {
		if !e.Type().IsRegular() || !match(e.Name()) {
			continue
		}

		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("error cleaning the image cache directory: %w", err)
		}
	}

	return nil
}
