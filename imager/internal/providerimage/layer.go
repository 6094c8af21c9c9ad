package providerimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// entry is one entry of a layer: a directory (its name ends in "/"), or a regular file
// holding data or a copy of src.
type entry struct {
	name     string
	mode     int64
	uid, gid int
	data     []byte
	src      string
	// xattrs are written as PAX records (SCHILY.xattr.<name>), which container runtimes
	// apply when they unpack the layer.
	xattrs map[string]string
}

func (e entry) isDir() bool { return strings.HasSuffix(e.name, "/") }

// newLayer writes the entries and the directories above them as a gzipped tar, the same
// bytes every time: entries sorted by path, every mtime mtime, numeric owners only (root
// unless given), a gzip header without name or time. Files are streamed from disk; the
// compressed layer is kept in memory, as go-containerregistry reads it more than once.
func newLayer(mtime time.Time, entries []entry) (v1.Layer, error) {
	byName := map[string]entry{}

	for _, e := range entries {
		if _, dup := byName[e.name]; dup {
			return nil, fmt.Errorf("%s is in the layer twice", e.name)
		}

		byName[e.name] = e
	}

	for _, e := range entries {
		for dir := path.Dir(strings.TrimSuffix(e.name, "/")); dir != "."; dir = path.Dir(dir) {
			if _, ok := byName[dir+"/"]; !ok {
				byName[dir+"/"] = entry{name: dir + "/", mode: 0o755}
			}
		}
	}

	names := make([]string, 0, len(byName))
	for name := range byName {
		names = append(names, name)
	}

	slices.SortFunc(names, compareNames)

	var compressed bytes.Buffer

	zw, err := gzip.NewWriterLevel(&compressed, gzip.DefaultCompression)
	if err != nil {
		return nil, err
	}

	tw := tar.NewWriter(zw)

	for _, name := range names {
		if err = writeEntry(tw, byName[name], mtime); err != nil {
			return nil, fmt.Errorf("error writing %s: %w", name, err)
		}
	}

	if err = tw.Close(); err != nil {
		return nil, fmt.Errorf("error closing the archive: %w", err)
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

func writeEntry(tw *tar.Writer, e entry, mtime time.Time) error {
	h := &tar.Header{
		Name: e.name, Mode: e.mode, Uid: e.uid, Gid: e.gid, ModTime: mtime,
		Typeflag: tar.TypeReg, Format: tar.FormatUSTAR,
	}

	if e.isDir() {
		h.Typeflag = tar.TypeDir
	}

	if len(e.xattrs) > 0 {
		h.Format, h.PAXRecords = tar.FormatPAX, map[string]string{}

		for k, v := range e.xattrs {
			h.PAXRecords["SCHILY.xattr."+k] = v
		}
	}

	var src *os.File

	switch {
	case e.isDir():
	case e.src != "":
		f, err := os.Open(e.src)
		if err != nil {
			return err
		}

		defer f.Close()

		info, err := f.Stat()
		if err != nil {
			return err
		}

		src, h.Size = f, info.Size()
	default:
		h.Size = int64(len(e.data))
	}

	if err := tw.WriteHeader(h); err != nil {
		return err
	}

	if src == nil {
		_, err := tw.Write(e.data)

		return err
	}

	// Exactly the size in the header: a file shrinking while it is read fails here.
	if _, err := io.CopyN(tw, src, h.Size); err != nil {
		return fmt.Errorf("error copying %s: %w", e.src, err)
	}

	return nil
}

// compareNames orders paths as a directory walk would: a directory right before what it
// holds ("a/" < "a/b" < "a-b"), whatever bytes the names have.
func compareNames(a, b string) int {
	return strings.Compare(strings.ReplaceAll(a, "/", "\x00"), strings.ReplaceAll(b, "/", "\x00"))
}
