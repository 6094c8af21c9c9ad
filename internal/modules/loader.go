package modules

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"
)

// Loader inserts a module (its File) into the kernel. It returns an error
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
	f, err := os.Open(m.File)
	if err != nil {
		return fmt.Errorf("opening %s: %w", m.File, err)
	}
	defer f.Close()

	comp := compression(m.File)

	flags := 0
	if comp != "" {
		flags = unix.MODULE_INIT_COMPRESSED_FILE
	}

	err = unix.FinitModule(int(f.Fd()), "", flags)
	if err == nil || comp == "" || !(errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS)) {
		if err != nil {
			return fmt.Errorf("finit_module %s: %w", m.File, err)
		}

		return nil
	}

	image, derr := ReadDecompressed(m.File)
	if derr != nil {
		return derr
	}

	if err := unix.InitModule(image, ""); err != nil {
		return fmt.Errorf("init_module %s: %w", m.File, err)
	}

	return nil
}

// LoadDir loads every module in dir (*.ko) in name order with l, a module already loaded
// being fine, and returns the files it loaded: the tiny initramfs of a test names its
// modules so that name order is load order.
func LoadDir(l Loader, dir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.ko"))
	if err != nil {
		return nil, fmt.Errorf("error listing modules: %w", err)
	}

	slices.Sort(files)

	for _, f := range files {
		if err := l.Load(Module{File: f}); err != nil && !errors.Is(err, unix.EEXIST) {
			return nil, fmt.Errorf("error loading module %s: %w", f, err)
		}
	}

	return files, nil
}
