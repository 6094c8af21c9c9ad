package wipe

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestEraseKindOf(t *testing.T) {
	t.Parallel()

	root := t.TempDir()

	for name, files := range map[string]map[string]string{
		"nvme0n1":   {},
		"nvme0n1p1": {"partition": "1"},
		"sda":       {"device/vendor": "ATA     \n"},
		"sdb":       {"device/vendor": "SEAGATE \n"},
		"sdc":       {"device/vendor": "Generic \n"}, // a USB bridge
		"vda":       {},
	} {
		dir := filepath.Join(root, "class", "block", name)
		require.NoError(t, os.MkdirAll(filepath.Join(dir, "device"), 0o755))

		for f, content := range files {
			require.NoError(t, os.WriteFile(filepath.Join(dir, f), []byte(content), 0o644))
		}
	}

	for _, tc := range []struct {
		name   string
		want   eraseKind
		reason string
	}{
		{"nvme0n1", kindNVMe, ""},
		{"nvme0n1p1", kindNone, "a partition, not a whole disk"},
		{"sda", kindATA, ""},
		{"sdb", kindNone, `a SCSI disk of vendor "SEAGATE", not an ATA disk behind libata`},
		{"sdc", kindNone, `a SCSI disk of vendor "Generic", not an ATA disk behind libata`},
		{"vda", kindNone, "neither an NVMe namespace nor an ATA disk"},
		{"sdz", kindNone, "no block device sdz in sysfs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			kind, reason := eraseKindOf(root, tc.name)
			assert.Equal(t, tc.want, kind)
			assert.Equal(t, tc.reason, reason)
		})
	}
}

func TestSecureEraseOfFile(t *testing.T) {
	t.Parallel()

	path := filepath.Join(t.TempDir(), "disk.img")
	require.NoError(t, os.WriteFile(path, bytes.Repeat([]byte{1}, 1<<20), 0o644))

	_, err := Device(t.Context(), path, ModeSecureErase, nil)
	require.ErrorIs(t, err, ErrSecureEraseUnsupported)
	assert.EqualError(t, err, "secure erase not supported by "+path+": not a block device")
}

func TestSamplesVerify(t *testing.T) {
	t.Parallel()

	const size = 1 << 20

	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i*7 + i/4096)
	}

	for _, tc := range []struct {
		name       string
		before     []byte
		after      func([]byte)
		wantZeroes bool
		wantErr    string
	}{
		{name: "zeroed", before: data, after: func(b []byte) { clear(b) }, wantZeroes: true},
		{name: "changed, zeroes not promised", before: data, after: func(b []byte) {
			for i := range b {
				b[i] ^= 0x5a
			}
		}},
		{name: "changed, zeroes promised", before: data, after: func(b []byte) { b[0] ^= 1 }, wantZeroes: true, wantErr: "block at 0 is not zero after the erase"},
		{name: "one block untouched", before: data, after: func(b []byte) {
			keep := append([]byte(nil), b[size-4096:]...)
			for i := range b {
				b[i] = 0xff
			}
			copy(b[size-4096:], keep)
		}, wantErr: "block at 1044480 still holds what it held before the erase"},
		{name: "erased blank stays blank", before: make([]byte, size), after: func([]byte) {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			path := filepath.Join(t.TempDir(), "disk.img")
			require.NoError(t, os.WriteFile(path, tc.before, 0o644))

			f, err := os.OpenFile(path, os.O_RDWR, 0)
			require.NoError(t, err)

			defer f.Close()

			s, err := takeSamples(f, size)
			require.NoError(t, err)

			after := append([]byte(nil), tc.before...)
			tc.after(after)
			_, err = f.WriteAt(after, 0)
			require.NoError(t, err)

			verified, err := s.verify(f, tc.wantZeroes)
			if tc.wantErr != "" {
				require.EqualError(t, err, tc.wantErr)

				return
			}

			require.NoError(t, err)
			assert.Contains(t, verified, "sample blocks read back")
		})
	}

	assert.True(t, errors.Is(unsupported("x", "y"), ErrSecureEraseUnsupported))
}
