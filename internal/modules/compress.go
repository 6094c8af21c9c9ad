package modules

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

// compressions are the extensions of the compressed modules a kernel tree may
// hold (kernel/x/y.ko.xz), which also compress firmware files.
var compressions = []string{".xz", ".zst", ".gz"}

// compression is the extension of a compressed module, "" for a plain .ko.
func compression(path string) string {
	for _, ext := range compressions {
		if strings.HasSuffix(path, ".ko"+ext) {
			return ext
		}
	}

	return ""
}

// ReadDecompressed reads a module (or firmware) file, decompressing it by its
// extension (.xz, .zst, .gz); any other file is read as it is.
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
