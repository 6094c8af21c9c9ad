package stormbench

import (
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
)

// Fake asset sizes: those of the agent's real kernel and zstd initramfs (17 MB in all).
const (
	fakeKernelSize = 8 << 20
	fakeInitrdSize = 9 << 20
)

func (c *Config) assetsDir() string {
	if c.AssetsDir != "" {
		return c.AssetsDir
	}

	return filepath.Join(c.WorkDir, "assets")
}

func (c *Config) tftpRoot() string { return filepath.Join(c.WorkDir, "tftp") }

func (c *Config) biosFile() string { return "undionly.kpxe" }

// initramfsName is the initramfs file in the assets directory (.zst or .xz).
func (c *Config) initramfsName() string {
	for _, n := range []string{"initramfs-amd64.zst", "initramfs-amd64.xz"} {
		if _, err := os.Stat(filepath.Join(c.assetsDir(), n)); err == nil {
			return n
		}
	}

	return "initramfs-amd64.xz"
}

func (c *Config) assetSizes() (kernel, initrd int64, err error) {
	for _, f := range []struct {
		name string
		size *int64
	}{{"vmlinuz-amd64", &kernel}, {c.initramfsName(), &initrd}} {
		fi, err := os.Stat(filepath.Join(c.assetsDir(), f.name))
		if err != nil {
			return 0, 0, fmt.Errorf("error reading the agent assets: %w", err)
		}

		*f.size = fi.Size()
	}

	return kernel, initrd, nil
}

// prepare writes the TFTP root (the iPXE binary: Debian's, or a made-up one of its
// size) and, without real assets, fake agent assets of the real size.
func prepare(cfg *Config) error {
	for _, d := range []string{cfg.WorkDir, cfg.tftpRoot()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("error creating %s: %w", d, err)
		}
	}

	ipxe, err := os.ReadFile("/usr/lib/ipxe/" + cfg.biosFile())
	if err != nil {
		ipxe = randomBytes(74 << 10) // the size of Debian's undionly.kpxe
	}

	if err := os.WriteFile(filepath.Join(cfg.tftpRoot(), cfg.biosFile()), ipxe, 0o644); err != nil { //nolint:gosec // the bench's own work directory
		return fmt.Errorf("error writing the TFTP root: %w", err)
	}

	if cfg.AssetsDir != "" {
		_, _, err := cfg.assetSizes()

		return err
	}

	return writeFakeAssets(cfg.assetsDir())
}

// writeFakeAssets writes incompressible stand-ins of the agent's assets, kept across
// runs when their sizes match.
func writeFakeAssets(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("error creating %s: %w", dir, err)
	}

	files := []struct {
		name string
		size int64
	}{{"vmlinuz-amd64", fakeKernelSize}, {"initramfs-amd64.xz", fakeInitrdSize}}

	for _, f := range files {
		path := filepath.Join(dir, f.name)
		if fi, err := os.Stat(path); err == nil && fi.Size() == f.size {
			continue
		}

		if err := writeRandom(path, f.size); err != nil {
			return err
		}
	}

	cmdline := "console=ttyS0 console=tty0 printk.devkmsg=on\n"
	if err := os.WriteFile(filepath.Join(dir, "cmdline-amd64"), []byte(cmdline), 0o644); err != nil {
		return fmt.Errorf("error writing the fake cmdline: %w", err)
	}

	return nil
}

func writeRandom(path string, size int64) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("error creating %s: %w", path, err)
	}

	_, err = io.Copy(f, io.LimitReader(rand.NewChaCha8([32]byte{'a', 'n', 'v', 'i', 'l'}), size))

	if cerr := f.Close(); err == nil {
		err = cerr
	}

	if err != nil {
		return fmt.Errorf("error writing %s: %w", path, err)
	}

	return nil
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.NewChaCha8([32]byte{'i', 'p', 'x', 'e'}).Read(b)

	return b
}
