// Package initramfstest reads back what the initramfs package writes, for tests.
package initramfstest

import (
	"bytes"
	"io"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/u-root/u-root/pkg/cpio"

	"github.com/anvil-metal/anvil/internal/initramfs"
)

// Records decompresses an archive compressed with c and returns its records, the
// trailer excluded.
func Records(t testing.TB, data []byte, c initramfs.Compression) []cpio.Record {
	t.Helper()

	zr, err := initramfs.Decompress(bytes.NewReader(data), c)
	require.NoError(t, err)

	raw, err := io.ReadAll(zr)
	require.NoError(t, err)
	require.NoError(t, zr.Close())

	recs, err := cpio.ReadAllRecords(cpio.EOFReader{RecordReader: cpio.Newc.Reader(bytes.NewReader(raw))})
	require.NoError(t, err)

	return recs
}

// Content is a record's content, none for a record without (a directory, a link).
func Content(t testing.TB, r cpio.Record) []byte {
	t.Helper()

	if r.ReaderAt == nil {
		return nil
	}

	b, err := io.ReadAll(io.NewSectionReader(r.ReaderAt, 0, int64(r.FileSize))) //nolint:gosec // a test's own archive, of sizes it wrote
	require.NoError(t, err)

	return b
}
