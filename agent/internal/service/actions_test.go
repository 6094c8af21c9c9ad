package service

import (
	"crypto/sha256"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/anvil-metal/anvil/agent/internal/wipe"
	agentv1 "github.com/anvil-metal/anvil/api/agent/v1"
)

func TestWipeMode(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		in      agentv1.Wipe_Mode
		want    wipe.Mode
		wantErr string
	}{
		{agentv1.Wipe_MODE_FAST, wipe.ModeFast, ""},
		{agentv1.Wipe_MODE_ZEROES, wipe.ModeZeroes, ""},
		{agentv1.Wipe_MODE_SECURE_ERASE, wipe.ModeSecureErase, ""},
		{agentv1.Wipe_Mode(99), "", "is not supported by this agent"},
	} {
		got, err := wipeMode(tc.in)
		if tc.wantErr != "" {
			assert.ErrorContains(t, err, tc.wantErr, tc.in)

			continue
		}

		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, got, tc.in)
	}
}

// wipeFixture is a machine of files: a sysfs with block devices, /dev with a sparse image
// per disk that has a medium, and a mountinfo saying the agent runs from vdb.
func wipeFixture(t *testing.T) *machineActions {
	t.Helper()

	sysfs, dev := t.TempDir(), t.TempDir()

	const size = 64 << 20

	for name, files := range map[string]map[string]string{
		"vda": {"dev": "253:0", "serial": "disk-a"},
		"vdb": {"dev": "253:16", "serial": "disk-b"},
		"sda": {"dev": "8:0", "removable": "1", "serial": "stick"},
		"sr0": {"dev": "11:0", "ro": "1", "removable": "1"},
	} {
		dir := filepath.Join(sysfs, "block", name)
		require.NoError(t, os.MkdirAll(dir, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "size"), []byte("131072\n"), 0o644))

		for f, content := range files {
			require.NoError(t, os.WriteFile(filepath.Join(dir, f), []byte(content+"\n"), 0o644))
		}

		require.NoError(t, os.MkdirAll(filepath.Join(sysfs, "dev", "block"), 0o755))
		require.NoError(t, os.Symlink(dir, filepath.Join(sysfs, "dev", "block", files["dev"])))

		if name != "sr0" {
			img, err := os.Create(filepath.Join(dev, name))
			require.NoError(t, err)
			require.NoError(t, img.Truncate(size))
			_, err = img.WriteAt([]byte(strings.Repeat("data", 1024)), 0)
			require.NoError(t, err)
			require.NoError(t, img.Close())
		}
	}

	mountinfo := filepath.Join(t.TempDir(), "mountinfo")
	require.NoError(t, os.WriteFile(mountinfo, []byte("1 0 253:16 / / rw - ext4 /dev/vdb rw\n"), 0o644))

	return &machineActions{logger: zaptest.NewLogger(t), sysfsRoot: sysfs, devRoot: dev, mountinfo: mountinfo}
}

// firstBlock reads the first 4 KiB of the fixture's disk.
func firstBlock(t *testing.T, a *machineActions, name string) []byte {
	t.Helper()

	f, err := os.Open(filepath.Join(a.devRoot, name))
	require.NoError(t, err)

	defer f.Close()

	buf := make([]byte, 4096)
	_, err = f.ReadAt(buf, 0)
	require.NoError(t, err)

	return buf
}

func TestWipe(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name  string
		order *agentv1.Wipe
		// want maps disks to their method (wiped) or, prefixed with "skipped: ", the reason.
		want map[string]string
	}{
		{
			name:  "fast",
			order: &agentv1.Wipe{Mode: agentv1.Wipe_MODE_FAST, GenerationId: "g1"},
			want: map[string]string{
				"sda": "skipped: removable media (flagged removable)",
				"sr0": "skipped: CD-ROM",
				"vda": "zeroed edges",
				"vdb": "skipped: the agent booted from it",
			},
		},
		{
			name:  "secure erase falls back to zeroes, removable media included",
			order: &agentv1.Wipe{Mode: agentv1.Wipe_MODE_SECURE_ERASE, GenerationId: "g2", IncludeRemovable: true},
			want: map[string]string{
				"sda": "zeroes (secure erase not supported by %s: not a block device)",
				"sr0": "skipped: CD-ROM",
				"vda": "zeroes (secure erase not supported by %s: not a block device)",
				"vdb": "skipped: the agent booted from it",
			},
		},
		{
			name: "the install disk only",
			order: &agentv1.Wipe{
				Mode: agentv1.Wipe_MODE_FAST, GenerationId: "g3", IncludeRemovable: true,
				Scope: agentv1.Wipe_SCOPE_INSTALL_DISK, Selector: "serial=disk-a",
			},
			want: map[string]string{
				"sda": "kept: not the install disk (serial=disk-a)",
				"sr0": "skipped: CD-ROM",
				"vda": "zeroed edges",
				"vdb": "skipped: the agent booted from it",
			},
		},
		{
			name: "all but a data disk",
			order: &agentv1.Wipe{
				Mode: agentv1.Wipe_MODE_FAST, GenerationId: "g4", IncludeRemovable: true,
				Scope: agentv1.Wipe_SCOPE_ALL_EXCEPT, Selector: "serial=disk-a",
			},
			want: map[string]string{
				"sda": "zeroed edges",
				"sr0": "skipped: CD-ROM",
				"vda": "kept: matches the wipe's keep selector (serial=disk-a)",
				"vdb": "skipped: the agent booted from it",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			a := wipeFixture(t)

			before := map[string][32]byte{}
			for disk := range tc.want {
				before[disk] = imageSum(t, a, disk)
			}

			report, err := a.Wipe(t.Context(), tc.order)
			require.NoError(t, err)
			assert.Equal(t, tc.order.GetGenerationId(), report.GetGenerationId())

			got := map[string]string{}

			for _, d := range report.GetDisks() {
				if d.GetSkipped() != "" {
					prefix := "skipped: "
					if d.GetKept() {
						prefix = "" // the reason says "kept: "
					}

					got[d.GetDevice()] = prefix + d.GetSkipped()

					continue
				}

				got[d.GetDevice()] = d.GetMethod()

				assert.NotEmpty(t, d.GetVerified(), d.GetDevice())
				assert.Equal(t, make([]byte, 4096), firstBlock(t, a, d.GetDevice()), "%s is wiped", d.GetDevice())
			}

			want := map[string]string{}
			for disk, method := range tc.want {
				if strings.Contains(method, "%s") {
					method = strings.ReplaceAll(method, "%s", filepath.Join(a.devRoot, disk))
				}

				want[disk] = method
			}

			assert.Equal(t, want, got)

			// What was skipped or kept holds every byte it held.
			for disk, method := range tc.want {
				if strings.HasPrefix(method, "skipped: ") || strings.HasPrefix(method, "kept: ") {
					assert.Equal(t, before[disk], imageSum(t, a, disk), "%s must keep its data", disk)
				}
			}
		})
	}

	_, err := wipeFixture(t).Wipe(t.Context(), &agentv1.Wipe{Mode: agentv1.Wipe_Mode(99)})
	assert.ErrorContains(t, err, "not supported")
}

// TestWipeRefusesWhatItCannotRead: a scope or selector this agent cannot read, or an
// install disk it cannot find, wipes nothing.
func TestWipeRefusesWhatItCannotRead(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name  string
		order *agentv1.Wipe
		want  string
	}{
		{name: "a scope from a newer provider", order: &agentv1.Wipe{Scope: agentv1.Wipe_Scope(99), Selector: "serial=disk-a"}, want: "wipe scope 99 is not supported"},
		{name: "a malformed selector", order: &agentv1.Wipe{Scope: agentv1.Wipe_SCOPE_ALL_EXCEPT, Selector: "colour=red"}, want: `unknown key "colour"`},
		{name: "an install disk not there", order: &agentv1.Wipe{Scope: agentv1.Wipe_SCOPE_INSTALL_DISK, Selector: "serial=gone"}, want: "matches none"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			a := wipeFixture(t)
			before := imageSum(t, a, "vda")

			_, err := a.Wipe(t.Context(), tc.order)
			require.ErrorContains(t, err, tc.want)
			assert.Equal(t, before, imageSum(t, a, "vda"), "nothing is wiped")
		})
	}
}

// imageSum is the SHA-256 of a fixture disk's image (the zero sum for a disk with none).
func imageSum(t *testing.T, a *machineActions, name string) [32]byte {
	t.Helper()

	data, err := os.ReadFile(filepath.Join(a.devRoot, name))
	if errors.Is(err, fs.ErrNotExist) {
		return [32]byte{}
	}

	require.NoError(t, err)

	return sha256.Sum256(data)
}
