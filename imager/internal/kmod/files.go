package kmod

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"
)

// File is one file to ship, at Name relative to the tree it belongs in.
type File struct {
	Name string
	// Source is the file to copy, when Data is nil.
	Source string
	// Data is the content, when it was rewritten (index files) or decompressed.
	Data []byte
}

// Modules returns the selected modules' files, decompressed.
//
// Compressed modules (.ko.xz, .ko.zst, .ko.gz) are decompressed at build time and shipped
// as .ko: the whole initramfs is compressed anyway, so a second layer only costs ratio, and
// kernels without CONFIG_MODULE_DECOMPRESS (Debian 6.1 has none) cannot load them with a
// plain finit_module. The index files are rewritten to the .ko names to match.
func (s *Selection) Modules() ([]File, error) {
	files := make([]File, 0, len(s.Names))

	for _, name := range s.Names {
		m := s.Index.Modules[name]
		src := filepath.Join(s.Index.Dir, filepath.FromSlash(m.Path))

		f := File{Name: plainPath(m.Path), Source: src}

		if f.Name != m.Path {
			data, err := ReadDecompressed(src)
			if err != nil {
				return nil, err
			}

			f.Source, f.Data = "", data
		}

		files = append(files, f)
	}

	return files, nil
}

// ReadDecompressed reads a file, decompressing it by its extension (.xz, .zst, .gz).
func ReadDecompressed(file string) ([]byte, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("error reading %s: %w", file, err)
	}

	var r io.Reader

	switch filepath.Ext(file) {
	case ".xz":
		r, err = xz.NewReader(bytes.NewReader(raw))
	case ".zst":
		var d *zstd.Decoder

		d, err = zstd.NewReader(bytes.NewReader(raw))
		if err == nil {
			defer d.Close()
		}

		r = d
	case ".gz":
		r, err = gzip.NewReader(bytes.NewReader(raw))
	default:
		return raw, nil
	}

	if err != nil {
		return nil, fmt.Errorf("error decompressing %s: %w", file, err)
	}

	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("error decompressing %s: %w", file, err)
	}

	return data, nil
}

// plainPath strips a compression suffix: kernel/x/y.ko.xz → kernel/x/y.ko.
func plainPath(p string) string {
	for _, ext := range []string{".xz", ".zst", ".gz"} {
		if strings.HasSuffix(p, ".ko"+ext) {
			return strings.TrimSuffix(p, ext)
		}
	}

	return p
}
