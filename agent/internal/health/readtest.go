package health

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// ReadBudget bounds a disk's read test: how many samples, how large each, and how long
// the whole may take. Under TCG a full read of a disk takes hours; a bounded pass reads
// samples spread over the whole disk, and says how much it covered.
type ReadBudget struct {
	Samples    int
	SampleSize int
	Timeout    time.Duration
}

// DefaultReadBudget reads 256 samples of 1 MiB, spread over the disk, in at most 2 min.
var DefaultReadBudget = ReadBudget{Samples: 256, SampleSize: 1 << 20, Timeout: 2 * time.Minute}

// maxReadErrors is how many failed reads a check lists before it stops reading: a dying
// disk fails each one slowly.
const maxReadErrors = 8

// ReadTest reads samples spread evenly over the disk at path (size bytes), within the
// budget: any read error fails it, with the offsets; a test that could not cover its
// samples in time is unknown, never passed.
func ReadTest(ctx context.Context, component, path string, size uint64, b ReadBudget) Check {
	c := Check{Component: component, Name: "read test", Status: Passed}

	f, err := os.Open(path)
	if err != nil {
		return Check{Component: component, Name: "read test", Status: Unknown, Reasons: []string{err.Error()}}
	}

	defer f.Close()

	ctx, cancel := context.WithTimeout(ctx, b.Timeout)
	defer cancel()

	buf := make([]byte, b.SampleSize)
	offsets := sampleOffsets(size, b.Samples, uint64(len(buf)))
	start := time.Now()

	var read, failed int

	for _, off := range offsets {
		if ctx.Err() != nil {
			break
		}

		n := min(uint64(len(buf)), size-off)

		if _, err := f.ReadAt(buf[:n], int64(off)); err != nil && !errors.Is(err, io.EOF) { //nolint:gosec // within the disk
			failed++

			c.Reasons = append(c.Reasons, fmt.Sprintf("read error at byte %d: %v", off, err))
			if failed >= maxReadErrors {
				break
			}

			continue
		}

		read++
	}

	c.Facts = []string{
		fmt.Sprintf("%d of %d samples of %d KiB read in %s", read, len(offsets), b.SampleSize>>10, time.Since(start).Round(time.Millisecond)),
	}

	switch {
	case failed > 0:
		c.Status = Failed
	case read < len(offsets):
		c.Status = Unknown
		c.Reasons = append(c.Reasons, fmt.Sprintf("only %d of %d samples read within %s", read, len(offsets), b.Timeout))
	}

	return c
}

// sampleOffsets are n offsets spread evenly from the disk's first byte to its last
// sample, aligned to 4 KiB; fewer on a disk smaller than n samples.
func sampleOffsets(size uint64, n int, sample uint64) []uint64 {
	if size == 0 || n <= 0 {
		return nil
	}

	if size <= sample {
		return []uint64{0}
	}

	last := size - sample
	count := uint64(n)

	if step := last / max(count-1, 1); step < sample {
		count = last/sample + 1
	}

	offsets := make([]uint64, 0, count)

	for i := range count {
		off := last
		if count > 1 {
			off = (last * i / (count - 1)) &^ 4095
		}

		offsets = append(offsets, off)
	}

	return offsets
}
