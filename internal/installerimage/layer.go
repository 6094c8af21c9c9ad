package installerimage

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// WriteTree writes the directory dir as an uncompressed layer tar to w, the same bytes
// every time: entries in walk order, owned by root, every mtime mtime, links as links,
// modes with their setuid, setgid and sticky bits.
func WriteTree(w io.Writer, dir string, mtime time.Time) error {
	tw := tar.NewWriter(w)

	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("error reading %s: %w", p, err)
		}

		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err //nolint:wrapcheck // cannot fail: p is under dir
		}

		info, err := d.Info()
		if err != nil {
			return fmt.Errorf("error reading %s: %w", p, err)
		}

		h := &tar.Header{Name: filepath.ToSlash(rel), Mode: int64(info.Mode().Perm()), ModTime: mtime, Format: tar.FormatPAX}

		switch {
		case d.Type()&fs.ModeSymlink != 0:
			if h.Linkname, err = os.Readlink(p); err != nil {
				return fmt.Errorf("error reading link %s: %w", p, err)
			}

			h.Typeflag = tar.TypeSymlink
		case d.IsDir():
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		case info.Mode().IsRegular():
			h.Typeflag, h.Size = tar.TypeReg, info.Size()
		default:
			return nil
		}

		for bit, mode := range map[fs.FileMode]int64{fs.ModeSetuid: 0o4000, fs.ModeSetgid: 0o2000, fs.ModeSticky: 0o1000} {
			if info.Mode()&bit != 0 {
				h.Mode |= mode
			}
		}

		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("error writing %s: %w", h.Name, err)
		}

		if h.Typeflag != tar.TypeReg {
			return nil
		}

		return copyInto(tw, p)
	})
	if err != nil {
		return err
	}

	return tw.Close() //nolint:wrapcheck // the caller says what was written
}

// File is a regular file of a layer written by WriteFiles.
type File struct {
	// Name is the path in the layer, without a leading slash.
	Name string
	Mode int64
	// Source is the file on the host whose content it gets.
	Source string
}

// WriteFiles writes files, and the directories above them, as an uncompressed layer tar.
func WriteFiles(w io.Writer, files []File, mtime time.Time) error {
	tw := tar.NewWriter(w)
	dirs := map[string]bool{}

	slices.SortFunc(files, func(a, b File) int { return strings.Compare(a.Name, b.Name) })

	for _, f := range files {
		for d := filepath.Dir(f.Name); d != "." && d != "/" && !dirs[d]; d = filepath.Dir(d) {
			dirs[d] = true
		}
	}

	names := make([]string, 0, len(dirs))
	for d := range dirs {
		names = append(names, d)
	}

	slices.Sort(names)

	for _, d := range names {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: mtime, Format: tar.FormatPAX}); err != nil {
			return fmt.Errorf("error writing %s: %w", d, err)
		}
	}

	for _, f := range files {
		st, err := os.Stat(f.Source)
		if err != nil {
			return fmt.Errorf("error reading %s: %w", f.Source, err)
		}

		if err := tw.WriteHeader(&tar.Header{
			Typeflag: tar.TypeReg, Name: f.Name, Mode: f.Mode, Size: st.Size(), ModTime: mtime, Format: tar.FormatPAX,
		}); err != nil {
			return fmt.Errorf("error writing %s: %w", f.Name, err)
		}

		if err := copyInto(tw, f.Source); err != nil {
			return err
		}
	}

	return tw.Close() //nolint:wrapcheck // the caller says what was written
}

func copyInto(w io.Writer, src string) error {
	f, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("error opening %s: %w", src, err)
	}

	defer f.Close()

	if _, err := io.Copy(w, f); err != nil {
		return fmt.Errorf("error copying %s: %w", src, err)
	}

	return nil
}

// fileLayer is an uncompressed layer tar on disk: the registry serves it as it is, so
// its digest is its content's, computed once, and its diff ID the same.
type fileLayer struct {
	path   string
	digest v1.Hash
	size   int64
}

// LayerFromFile is the uncompressed layer tar at path.
func LayerFromFile(path string) (v1.Layer, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("error opening the layer %s: %w", path, err)
	}

	defer f.Close()

	h := sha256.New()

	n, err := io.Copy(h, f)
	if err != nil {
		return nil, fmt.Errorf("error reading the layer %s: %w", path, err)
	}

	return &fileLayer{path: path, size: n, digest: v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(h.Sum(nil))}}, nil
}

// Path is the layer's file, for a registry that serves blobs from disk.
func (l *fileLayer) Path() string { return l.path }

func (l *fileLayer) Digest() (v1.Hash, error)             { return l.digest, nil }
func (l *fileLayer) DiffID() (v1.Hash, error)             { return l.digest, nil }
func (l *fileLayer) Size() (int64, error)                 { return l.size, nil }
func (l *fileLayer) MediaType() (types.MediaType, error)  { return types.OCIUncompressedLayer, nil }
func (l *fileLayer) Compressed() (io.ReadCloser, error)   { return l.open() }
func (l *fileLayer) Uncompressed() (io.ReadCloser, error) { return l.open() }

func (l *fileLayer) open() (io.ReadCloser, error) {
	f, err := os.Open(l.path)
	if err != nil {
		return nil, fmt.Errorf("error opening the layer %s: %w", l.path, err)
	}

	return f, nil
}
