package modules

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"
	"golang.org/x/sys/unix"
)

// Loader inserts one module file into the kernel. It returns an error
// wrapping unix.EEXIST when the module is already loaded.
type Loader interface {
	Load(m Module) error
}

// Finit loads modules with finit_module(2). Compressed modules (.ko.xz,
// .ko.zst, .ko.gz) are handed to the kernel with MODULE_INIT_COMPRESSED_FILE
// so it decompresses them itself (Linux 5.17+ with CONFIG_MODULE_DECOMPRESS);
// when the kernel refuses that, Finit decompresses in memory and falls back
// to init_module(2).
type Finit struct{}

// Load implements Loader.
func (Finit) Load(m Module) error {
	f, err := os.Open(m.Path)
	if err != nil {
		return fmt.Errorf("opening %s: %w", m.Path, err)
	}
	defer f.Close()

	comp := compression(m.Path)

	flags := 0
	if comp != "" {
		flags = unix.MODULE_INIT_COMPRESSED_FILE
	}

	err = unix.FinitModule(int(f.Fd()), "", flags)
	if err == nil || comp == "" || !(errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS)) {
		if err != nil {
			return fmt.Errorf("finit_module %s: %w", m.Path, err)
		}

		return nil
	}

	image, derr := decompress(f, comp)
	if derr != nil {
		return fmt.Errorf("decompressing %s: %w", m.Path, derr)
	}

	if err := unix.InitModule(image, ""); err != nil {
		return fmt.Errorf("init_module %s: %w", m.Path, err)
	}

	return nil
}

func compression(path string) string {
	for _, ext := range []string{".xz", ".zst", ".gz"} {
		if strings.HasSuffix(path, ".ko"+ext) {
			return ext
		}
	}

	return ""
}

func decompress(f *os.File, ext string) ([]byte, error) {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}

	var r io.Reader

	switch ext {
	case ".xz":
		xr, err := xz.NewReader(f)
		if err != nil {
			return nil, err
		}

		r = xr
	case ".zst":
		zr, err := zstd.NewReader(f)
		if err != nil {
			return nil, err
		}
		defer zr.Close()

		r = zr
	case ".gz":
		gr, err := gzip.NewReader(f)
		if err != nil {
			return nil, err
		}

		r = gr
	default:
		r = f
	}

	return io.ReadAll(r)
}
