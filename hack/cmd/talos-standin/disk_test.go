package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSavedRoundTrip(t *testing.T) {
	t.Parallel()

	for _, s := range []*saved{
		{UniqueToken: "tok", Config: []byte("version: v1alpha1\n"), Join: joinArgs{API: "grpc://10.77.0.3:8090?jointoken=x"}, Schematic: "abc", Version: "v1.9.0"},
		{UniqueToken: "tok"}, // reset: the config gone, the token kept
	} {
		rec, err := encodeSaved(s)
		require.NoError(t, err)

		area := make([]byte, stateArea)
		copy(area, rec)

		got, err := decodeSaved(area)
		require.NoError(t, err)
		assert.Equal(t, s, got)
	}
}

func TestDecodeSavedBad(t *testing.T) {
	t.Parallel()

	good, err := encodeSaved(&saved{UniqueToken: "tok"})
	require.NoError(t, err)

	flipped := append([]byte(nil), good...)
	flipped[len(stateMagic)+9] ^= 0xff

	for name, tc := range map[string]struct {
		b       []byte
		none    bool
		wantErr string
	}{
		"zeros (wiped)":  {b: make([]byte, 64), none: true},
		"other data":     {b: []byte("ANVIL-DISK something else"), none: true},
		"cut short":      {b: []byte(stateMagic + "\x00\x00"), wantErr: "cut short"},
		"length too big": {b: append([]byte(stateMagic), 0xff, 0, 0, 0, 0, 0, 0, 0), wantErr: "more than its area"},
		"corrupt body":   {b: flipped, wantErr: "checksum"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()

			got, err := decodeSaved(tc.b)
			if tc.wantErr != "" {
				assert.ErrorContains(t, err, tc.wantErr)

				return
			}

			require.NoError(t, err)
			assert.Nil(t, got)
		})
	}
}

func TestSavedOnDisk(t *testing.T) {
	t.Parallel()

	path := filepath.Join(t.TempDir(), "disk")
	require.NoError(t, os.WriteFile(path, nil, 0o600))
	require.NoError(t, os.Truncate(path, 8<<20))

	d := disk{dev: path, size: 8 << 20}

	none, err := readSaved(d)
	require.NoError(t, err)
	assert.Nil(t, none)

	s := &saved{UniqueToken: "tok", Config: []byte("cfg")}
	require.NoError(t, writeSaved(d, s))

	got, err := readSaved(d)
	require.NoError(t, err)
	assert.Equal(t, s, got)

	// Only the disk's last MiB is the stand-in's: its start is untouched.
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, make([]byte, len(b)-stateArea), b[:len(b)-stateArea])
}

func TestFirstDisk(t *testing.T) {
	t.Parallel()

	root := t.TempDir()
	for name, sectors := range map[string]string{"loop0": "999999", "sr0": "999999", "vdb": "16384", "vda": "16777216", "ram0": "8192"} {
		require.NoError(t, os.MkdirAll(filepath.Join(root, name), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(root, name, "size"), []byte(sectors+"\n"), 0o644))
	}

	d, err := firstDisk(root)
	require.NoError(t, err)
	assert.Equal(t, disk{dev: "/dev/vda", size: 16777216 * 512}, d)

	_, err = firstDisk(t.TempDir())
	assert.Error(t, err)
}
