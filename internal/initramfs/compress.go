package initramfs

import (
	"fmt"
	"io"

	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"
)

// Compression is how the archive is compressed; the kernel needs CONFIG_RD_XZ or
// CONFIG_RD_ZSTD to match (Debian and Talos kernels have both).
type Compression string

// Supported compressions.
const (
	XZ   Compression = "xz"
	Zstd Compression = "zstd"
)

// Ext is the file extension of the compressed archive.
func (c Compression) Ext() string {
	if c == Zstd {
		return "zst"
	}

	return string(c)
}

// ParseCompression reads a --compression value.
func ParseCompression(s string) (Compression, error) {
	switch Compression(s) {
	case XZ, Zstd:
		return Compression(s), nil
	case "zst":
		return Zstd, nil
	default:
		return "", fmt.Errorf("unknown compression %q (want xz or zstd)", s)
	}
}

// Compress returns a writer compressing into w. The settings are fixed so that the same
// input gives the same bytes:
//
//   - xz: CRC32 check (the kernel's XZ decoder rejects the CRC64 default), one LZMA2 block,
//     8 MiB dictionary (xz -6); ulikunitz/xz is single-threaded and deterministic.
//   - zstd: level mapped from zstdLevel (1-22, zstd's scale, to klauspost's four encoder
//     levels), one frame with a checksum; the output does not depend on concurrency.
func Compress(w io.Writer, c Compression, zstdLevel int) (io.WriteCloser, error) {
	switch c {
	case XZ:
		zw, err := xz.WriterConfig{CheckSum: xz.CRC32, DictCap: 8 << 20}.NewWriter(w)
		if err != nil {
			return nil, fmt.Errorf("error starting the xz compressor: %w", err)
		}

		return zw, nil
	case Zstd:
		zw, err := zstd.NewWriter(w,
			zstd.WithEncoderLevel(zstd.EncoderLevelFromZstd(zstdLevel)),
			zstd.WithEncoderCRC(true),
		)
		if err != nil {
			return nil, fmt.Errorf("error starting the zstd compressor: %w", err)
		}

		return zw, nil
	default:
		return nil, fmt.Errorf("unknown compression %q", c)
	}
}

// Decompress returns a reader of what Compress wrote; tests and checks read archives back
// with it.
func Decompress(r io.Reader, c Compression) (io.ReadCloser, error) {
	switch c {
	case XZ:
		zr, err := xz.NewReader(r)
		if err != nil {
			return nil, fmt.Errorf("error reading xz: %w", err)
		}

		return io.NopCloser(zr), nil
	case Zstd:
		zr, err := zstd.NewReader(r)
		if err != nil {
			return nil, fmt.Errorf("error reading zstd: %w", err)
		}

		return zr.IOReadCloser(), nil
	default:
		return nil, fmt.Errorf("unknown compression %q", c)
	}
}
