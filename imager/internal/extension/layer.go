package extension

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// file is one regular file of the layer.
type file struct {
	name string
	mode int64
	data []byte
}

// newLayer writes the files and the directories above them as a gzipped tar, the same
// bytes every time: entries sorted by path, owned by root, every mtime mtime, no user or
// group names, a gzip header without name or time.
func newLayer(mtime time.Time, files []file) (v1.Layer, error) {
	dirs := map[string]bool{}

	for _, f := range files {
		for _, d := range dirsOf(f.name) {
			dirs[d] = true
		}
	}

	headers := make([]*tar.Header, 0, len(dirs)+len(files))
	data := map[string][]byte{}

	for d := range dirs {
		headers = append(headers, &tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755})
	}

	for _, f := range files {
		headers = append(headers, &tar.Header{Typeflag: tar.TypeReg, Name: f.name, Mode: f.mode, Size: int64(len(f.data))})
		data[f.name] = f.data
	}

	slices.SortFunc(headers, func(a, b *tar.Header) int { return compareNames(a.Name, b.Name) })

	var raw bytes.Buffer

	tw := tar.NewWriter(&raw)

	for _, h := range headers {
		h.ModTime, h.Format = mtime, tar.FormatUSTAR

		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("error writing %s: %w", h.Name, err)
		}

		if _, err := tw.Write(data[h.Name]); err != nil {
			return nil, fmt.Errorf("error writing %s: %w", h.Name, err)
		}
	}

	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("error closing the archive: %w", err)
	}

	var compressed bytes.Buffer

	zw, err := gzip.NewWriterLevel(&compressed, gzip.BestCompression)
	if err != nil {
		return nil, err
	}

	if _, err = zw.Write(raw.Bytes()); err != nil {
		return nil, fmt.Errorf("error compressing the archive: %w", err)
	}

	if err = zw.Close(); err != nil {
		return nil, fmt.Errorf("error compressing the archive: %w", err)
	}

	// Opened as gzip, kept as it is: go-containerregistry recompresses nothing.
	gz := compressed.Bytes()

	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(gz)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// compareNames orders paths as a directory walk would: a directory right before what it
// holds ("a/" < "a/b" < "a-b"), whatever bytes the names have.
func compareNames(a, b string) int {
	return strings.Compare(strings.ReplaceAll(a, "/", "\x00"), strings.ReplaceAll(b, "/", "\x00"))
}
