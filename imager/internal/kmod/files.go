package kmod

import (
	"strings"

	"github.com/anvil-metal/anvil/internal/modules"
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
		m, _ := s.Index.Module(name)
		f := File{Name: plainPath(m.Path), Source: m.File}

		if f.Name != m.Path {
			data, err := modules.ReadDecompressed(m.File)
			if err != nil {
				return nil, err
			}

			f.Source, f.Data = "", data
		}

		files = append(files, f)
	}

	return files, nil
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
