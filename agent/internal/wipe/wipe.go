// Package wipe erases disks: fast (discard, then zero the regions that identify data:
// partition tables and their backups, filesystem, RAID and LVM signatures at both ends),
// zeroes (the whole device) or secure erase (the drive's own erase: NVMe Format NVM,
// ATA SECURITY ERASE UNIT), then reads back samples to verify what it promises.
package wipe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/anvil-metal/anvil/agent/internal/ioctl"
)

// Fast wipe regions: GPT and its backup, MBR, MD superblocks (0.90/1.0 at the end, 1.1/1.2
// at the start), LVM labels and metadata, ZFS labels (two at each end, 256 KiB each), XFS,
// ext and the first btrfs superblock all lie within 16 MiB of an end; btrfs keeps a mirror
// at 64 MiB.
const (
	edgeBytes     = 16 << 20
	btrfsMirror   = 64 << 20
	btrfsSBSize   = 4 << 10
	bufferSize    = 4 << 20
	sampleCount   = 64
	sampleSize    = 4 << 10
	progressEvery = 2 * time.Second
)

// Mode is how a disk is wiped.
type Mode string

// Wipe modes.
const (
	ModeFast   Mode = "fast"
	ModeZeroes Mode = "zeroes"
	// ModeSecureErase asks the drive to erase itself (see secure.go); a drive that cannot
	// fails with an error matching ErrSecureEraseUnsupported, and the caller decides
	// whether another mode will do.
	ModeSecureErase Mode = "secure-erase"
)

// Report is what a wipe did to one disk.
type Report struct {
	Device   string
	Method   string
	Bytes    uint64
	Duration time.Duration
	Verified string
}

// Progress is told how far a long wipe got.
type Progress func(device string, done, total uint64)

// Device wipes the block device (or file) at path.
func Device(ctx context.Context, path string, mode Mode, progress Progress) (Report, error) {
	start := time.Now()

	f, err := os.OpenFile(path, os.O_RDWR|unix.O_EXCL, 0)
	if err != nil {
		return Report{}, fmt.Errorf("error opening %s: %w", path, err)
	}

	defer f.Close()

	size, err := deviceSize(f)
	if err != nil {
		return Report{}, fmt.Errorf("error reading the size of %s: %w", path, err)
	}

	report := Report{Device: path}

	switch mode {
	case ModeFast:
		report, err = fast(ctx, f, path, size)
	case ModeZeroes:
		report, err = zeroes(ctx, f, path, size, progress)
	case ModeSecureErase:
		report, err = secureErase(ctx, f, path, size)
	default:
		return Report{}, fmt.Errorf("unsupported wipe mode %q", mode)
	}

	if err != nil {
		return Report{}, err
	}

	if err = f.Sync(); err != nil {
		return Report{}, fmt.Errorf("error syncing %s: %w", path, err)
	}

	report.Duration = time.Since(start)

	return report, nil
}

func fast(ctx context.Context, f *os.File, path string, size uint64) (Report, error) {
	method := "zeroed edges"

	if err := discard(f, 0, size); err == nil {
		method = "discard, zeroed edges"
	}

	regions := edges(size)

	var written uint64

	for _, r := range regions {
		if err := ctx.Err(); err != nil {
			return Report{}, err
		}

		if err := zeroRange(f, zeroBuf, r.off, r.len, nil); err != nil {
			return Report{}, fmt.Errorf("error zeroing %s at %d: %w", path, r.off, err)
		}

		written += r.len
	}

	if err := f.Sync(); err != nil {
		return Report{}, fmt.Errorf("error syncing %s: %w", path, err)
	}

	if err := verifyZero(f, regions); err != nil {
		return Report{}, fmt.Errorf("verifying %s: %w", path, err)
	}

	return Report{Device: path, Method: method, Bytes: written, Verified: fmt.Sprintf("%d regions read back as zeroes (%d bytes)", len(regions), written)}, nil
}

func zeroes(ctx context.Context, f *os.File, path string, size uint64, progress Progress) (Report, error) {
	last := time.Now()

	// Direct I/O where the device takes it: through the page cache every byte is copied
	// once more and written back later, at about a quarter of the disk's speed (bench
	// wipe); a file system that refuses O_DIRECT (tmpfs) gets the cached path.
	w, buf, release := directWriter(path, f)
	defer release()

	// A tail that is not a multiple of directBlock cannot go direct: f (cached) takes it.
	bulk := size
	if w != f {
		bulk -= size % directBlock
	}

	err := zeroRange(w, buf, 0, bulk, func(done uint64) error {
		if err := ctx.Err(); err != nil {
			return err
		}

		if progress != nil && time.Since(last) >= progressEvery {
			progress(path, done, size)
			last = time.Now()
		}

		return nil
	})
	if err == nil && bulk < size {
		err = zeroRange(f, zeroBuf, bulk, size-bulk, nil)
	}

	if err != nil {
		return Report{}, fmt.Errorf("error zeroing %s: %w", path, err)
	}

	if progress != nil {
		progress(path, size, size)
	}

	if err = f.Sync(); err != nil {
		return Report{}, fmt.Errorf("error syncing %s: %w", path, err)
	}

	samples := append(edges(size), spread(size)...)
	if err = verifyZero(f, samples); err != nil {
		return Report{}, fmt.Errorf("verifying %s: %w", path, err)
	}

	return Report{Device: path, Method: "zeroes", Bytes: size, Verified: fmt.Sprintf("edges and %d samples across the disk read back as zeroes", sampleCount)}, nil
}

type region struct{ off, len uint64 }

// edges are the regions a fast wipe zeroes, clipped to the device.
func edges(size uint64) []region {
	if size <= 2*edgeBytes {
		return []region{{0, size}}
	}

	rs := []region{{0, edgeBytes}}

	if size > btrfsMirror+btrfsSBSize+edgeBytes {
		rs = append(rs, region{btrfsMirror, btrfsSBSize})
	}

	return append(rs, region{size - edgeBytes, edgeBytes})
}

// spread are sample blocks evenly across the device.
func spread(size uint64) []region {
	if size < sampleSize*sampleCount {
		return nil
	}

	step := (size - sampleSize) / (sampleCount - 1)
	rs := make([]region, 0, sampleCount)

	for i := range uint64(sampleCount) {
		off := (i * step) &^ (sampleSize - 1)
		rs = append(rs, region{off, sampleSize})
	}

	return rs
}

var zeroBuf = make([]byte, bufferSize)

// alignedZeros is a page-aligned zero buffer for O_DIRECT writes (Go gives no alignment
// guarantee for a slice; an anonymous mapping is page-aligned and zero).
var alignedZeros = func() []byte {
	b, err := unix.Mmap(-1, 0, bufferSize, unix.PROT_READ, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil
	}

	return b
}()

// directWriter opens path again with O_DIRECT (without O_EXCL: the wipe holds that on f)
// and returns it with a page-aligned zero buffer, or f and the ordinary buffer when the
// device or its file system refuses direct I/O.
func directWriter(path string, f *os.File) (*os.File, []byte, func()) {
	if alignedZeros == nil {
		return f, zeroBuf, func() {}
	}

	d, err := os.OpenFile(path, os.O_WRONLY|unix.O_DIRECT, 0)
	if err != nil {
		return f, zeroBuf, func() {}
	}

	// Probe one block: some file systems take the open and refuse the write.
	if _, err = d.WriteAt(alignedZeros[:directBlock], 0); err != nil {
		d.Close()

		return f, zeroBuf, func() {}
	}

	return d, alignedZeros, func() { d.Close() }
}

// directBlock is the alignment direct writes keep (a multiple of every logical block
// size in use).
const directBlock = 4096

func zeroRange(f *os.File, buf []byte, off, n uint64, tick func(done uint64) error) error {
	for done := uint64(0); done < n; {
		chunk := min(uint64(len(buf)), n-done)

		if _, err := f.WriteAt(buf[:chunk], int64(off+done)); err != nil { //nolint:gosec // offsets within the device's size
			return err
		}

		done += chunk

		if tick != nil {
			if err := tick(done); err != nil {
				return err
			}
		}
	}

	return nil
}

func verifyZero(f *os.File, regions []region) error {
	buf := make([]byte, bufferSize)

	for _, r := range regions {
		for done := uint64(0); done < r.len; {
			chunk := min(uint64(len(buf)), r.len-done)

			n, err := f.ReadAt(buf[:chunk], int64(r.off+done)) //nolint:gosec // offsets within the device's size
			if err != nil && !errors.Is(err, io.EOF) {
				return fmt.Errorf("error reading back at %d: %w", r.off+done, err)
			}

			for i, b := range buf[:n] {
				if b != 0 {
					return fmt.Errorf("byte at %d is not zero after the wipe", r.off+done+uint64(i))
				}
			}

			done += chunk
		}
	}

	return nil
}

// discard tells the device the range holds nothing (BLKDISCARD); files and devices that
// do not support it say so, and the wipe goes on without.
func discard(f *os.File, off, n uint64) error {
	st, err := f.Stat()
	if err != nil {
		return err
	}

	if st.Mode()&os.ModeDevice == 0 {
		return errors.ErrUnsupported
	}

	r := [2]uint64{off, n}

	_, err = ioctl.Ptr(f.Fd(), unix.BLKDISCARD, ioctl.Pointer(&r))

	return err
}

func deviceSize(f *os.File) (uint64, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}

	if st.Mode()&os.ModeDevice == 0 {
		return uint64(st.Size()), nil //nolint:gosec // a file's size: not negative
	}

	var size uint64
	if _, err = ioctl.Ptr(f.Fd(), unix.BLKGETSIZE64, ioctl.Pointer(&size)); err != nil {
		return 0, err
	}

	return size, nil
}
