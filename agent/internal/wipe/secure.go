package wipe

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/anvil-metal/anvil/agent/internal/ioctl"
	"github.com/anvil-metal/anvil/agent/internal/nvme"
)

// ErrSecureEraseUnsupported is matched (errors.Is) by the error of a secure erase the
// drive cannot do: not NVMe or ATA, no Format NVM, no ATA security feature set, or a
// drive frozen until its next power cycle. Device does not fall back to another mode by
// itself: whether zeroes will do instead of a secure erase is the caller's decision.
var ErrSecureEraseUnsupported = errors.New("secure erase not supported")

type unsupportedError struct{ dev, reason string }

func (e *unsupportedError) Error() string {
	return fmt.Sprintf("secure erase not supported by %s: %s", e.dev, e.reason)
}

func (e *unsupportedError) Is(target error) bool { return target == ErrSecureEraseUnsupported }

func unsupported(dev, format string, args ...any) error {
	return &unsupportedError{dev: dev, reason: fmt.Sprintf(format, args...)}
}

// sysfsRoot is where Device looks the disk up; tests call the pure functions with fixtures.
const sysfsRoot = "/sys"

type eraseKind int

const (
	kindNone eraseKind = iota
	kindNVMe
	kindATA
)

// eraseKindOf tells how the whole disk called name (the kernel's name) erases itself,
// from sysfs: NVMe namespaces by name, ATA disks as libata presents them to SCSI (vendor
// "ATA"); for anything else the reason says why not.
func eraseKindOf(root, name string) (eraseKind, string) {
	dir := filepath.Join(root, "class", "block", name)

	if _, err := os.Stat(dir); err != nil {
		return kindNone, fmt.Sprintf("no block device %s in sysfs", name)
	}

	if _, err := os.Stat(filepath.Join(dir, "partition")); err == nil {
		return kindNone, "a partition, not a whole disk"
	}

	switch {
	case strings.HasPrefix(name, "nvme"):
		return kindNVMe, ""
	case strings.HasPrefix(name, "sd"):
		vendor := readTrimmed(filepath.Join(dir, "device", "vendor"))
		if vendor == "ATA" {
			return kindATA, ""
		}

		// SAS and USB disks would need SCSI SANITIZE or a bridge that passes ATA through.
		return kindNone, fmt.Sprintf("a SCSI disk of vendor %q, not an ATA disk behind libata", vendor)
	default:
		return kindNone, "neither an NVMe namespace nor an ATA disk"
	}
}

// blockName is the kernel's name of the block device numbered rdev.
func blockName(root string, rdev uint64) (string, error) {
	link := filepath.Join(root, "dev", "block", fmt.Sprintf("%d:%d", unix.Major(rdev), unix.Minor(rdev)))

	target, err := os.Readlink(link)
	if err != nil {
		return "", fmt.Errorf("error looking the device up in sysfs: %w", err)
	}

	return filepath.Base(target), nil
}

func readTrimmed(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}

	return strings.TrimSpace(string(b))
}

func secureErase(ctx context.Context, f *os.File, path string, size uint64) (Report, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return Report{}, fmt.Errorf("error reading %s: %w", path, err)
	}

	if st.Mode&unix.S_IFMT != unix.S_IFBLK {
		return Report{}, unsupported(path, "not a block device")
	}

	name, err := blockName(sysfsRoot, st.Rdev)
	if err != nil {
		return Report{}, fmt.Errorf("%s: %w", path, err)
	}

	kind, reason := eraseKindOf(sysfsRoot, name)
	if kind == kindNone {
		return Report{}, unsupported(path, "%s", reason)
	}

	before, err := takeSamples(f, size)
	if err != nil {
		return Report{}, fmt.Errorf("error sampling %s before the erase: %w", path, err)
	}

	var res eraseResult

	switch kind {
	case kindNVMe:
		res, err = eraseNVMe(ctx, &nvme.File{F: f}, path)
	case kindATA:
		res, err = eraseATA(ctx, &sgFile{f: f}, path)
	}

	if err != nil {
		return Report{}, err
	}

	// The page cache may still hold what the samples read before the erase.
	if _, err = ioctl.Int(f.Fd(), unix.BLKFLSBUF, 0); err != nil {
		return Report{}, fmt.Errorf("error dropping the cached pages of %s: %w", path, err)
	}

	verified, err := before.verify(f, res.zeroes)
	if err != nil {
		return Report{}, fmt.Errorf("verifying %s: %w", path, err)
	}

	if res.note != "" {
		verified += "; " + res.note
	}

	return Report{Device: path, Method: res.method, Bytes: size, Verified: verified}, nil
}

// eraseResult is what a drive's erase did: its method, whether it promises zeroes to
// read back, and anything a reader of the report should know.
type eraseResult struct {
	method string
	zeroes bool
	note   string
}

// samples are blocks read before an erase, to tell afterwards that the data is gone
// even where the drive does not promise zeroes (crypto erase, ATA enhanced erase, NVMe
// user data erase: "indeterminate" contents).
type samples struct {
	regions []region
	data    [][]byte
}

func sampleRegions(size uint64) []region {
	rs := []region{{0, min(size, sampleSize)}}

	if size >= 2*sampleSize {
		rs = append(rs, region{(size - sampleSize) &^ (sampleSize - 1), sampleSize})
	}

	return append(rs, spread(size)...)
}

func takeSamples(f *os.File, size uint64) (samples, error) {
	s := samples{regions: sampleRegions(size)}

	for _, r := range s.regions {
		buf := make([]byte, r.len)
		if _, err := f.ReadAt(buf, int64(r.off)); err != nil { //nolint:gosec // offsets within the device's size
			return samples{}, fmt.Errorf("error reading at %d: %w", r.off, err)
		}

		s.data = append(s.data, buf)
	}

	return s, nil
}

// verify reads the samples again: each must read back as zeroes when the erase promises
// zeroes, and otherwise must not hold what it held before, unless that was one byte
// repeated (what an erased block may read as, so no evidence either way).
func (s samples) verify(f *os.File, wantZeroes bool) (string, error) {
	var zero, held int

	for i, r := range s.regions {
		after := make([]byte, r.len)
		if _, err := f.ReadAt(after, int64(r.off)); err != nil { //nolint:gosec // offsets within the device's size
			return "", fmt.Errorf("error reading back at %d: %w", r.off, err)
		}

		isZero := uniform(after) && after[0] == 0
		if isZero {
			zero++
		}

		if wantZeroes && !isZero {
			return "", fmt.Errorf("block at %d is not zero after the erase", r.off)
		}

		if uniform(s.data[i]) {
			continue
		}

		held++

		if bytes.Equal(after, s.data[i]) {
			return "", fmt.Errorf("block at %d still holds what it held before the erase", r.off)
		}
	}

	return fmt.Sprintf("%d sample blocks read back: %d as zeroes; all %d that held data before no longer do",
		len(s.regions), zero, held), nil
}

func uniform(b []byte) bool {
	return len(b) == 0 || bytes.Count(b, b[:1]) == len(b)
}
