package resources_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/provider/internal/resources"
)

const backupMachine = "4c4c4544-0000-1000-8000-0000000000b1"

// newStateWithBackup writes a state with one machine in dir, takes a backup of it and
// closes it; it returns the backup's path.
func newStateWithBackup(t *testing.T, dir string) string {
	t.Helper()

	st, err := resources.Open(t.Context(), dir)
	require.NoError(t, err)

	m := resources.NewMachine(backupMachine)
	m.TypedSpec().UUID = backupMachine
	m.TypedSpec().Arch = "amd64"
	require.NoError(t, st.Create(t.Context(), m))

	backup, err := st.Backup(t.Context())
	require.NoError(t, err)
	require.NoError(t, st.Close())

	return backup
}

func TestBackupIsVerifiedPrivateAndPruned(t *testing.T) {
	t.Parallel()

	dir := t.TempDir()
	newStateWithBackup(t, dir)

	st, err := resources.Open(t.Context(), dir, resources.WithBackupKeep(2))
	require.NoError(t, err)

	t.Cleanup(func() { require.NoError(t, st.Close()) })

	var last string

	for range 3 {
		last, err = st.Backup(t.Context())
		require.NoError(t, err)
	}

	names, err := resources.Backups(dir)
	require.NoError(t, err)
	require.Len(t, names, 2, "only the newest two are kept")
	require.Equal(t, last, names[0], "newest first")

	fi, err := os.Stat(last)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	keys, err := resources.LoadKeys(dir)
	require.NoError(t, err)

	sum, err := resources.VerifyFile(last, keys)
	require.NoError(t, err)
	require.Positive(t, sum.Resources)

	leftovers, err := filepath.Glob(filepath.Join(dir, resources.BackupDirName, "*.tmp"))
	require.NoError(t, err)
	require.Empty(t, leftovers)
}

func TestOpenRefusesDamagedState(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, dir string)
	}{
		{"empty", func(t *testing.T, dir string) {
			require.NoError(t, os.Truncate(resources.DBFile(dir), 0))
		}},
		{"truncated", func(t *testing.T, dir string) {
			fi, err := os.Stat(resources.DBFile(dir))
			require.NoError(t, err)
			require.NoError(t, os.Truncate(resources.DBFile(dir), fi.Size()/2))
		}},
		{"missing", func(t *testing.T, dir string) {
			require.NoError(t, os.Remove(resources.DBFile(dir)))
		}},
		{"meta pages overwritten", func(t *testing.T, dir string) {
			overwrite(t, resources.DBFile(dir), 0, 2*4096)
		}},
		{"data pages overwritten", func(t *testing.T, dir string) {
			fi, err := os.Stat(resources.DBFile(dir))
			require.NoError(t, err)
			overwrite(t, resources.DBFile(dir), 2*4096, int(fi.Size())-2*4096)
		}},
		{"another key", func(t *testing.T, dir string) {
			// The state no longer decrypts; the backups do not either.
			require.NoError(t, os.WriteFile(filepath.Join(dir, "provider.key"), []byte(strings.Repeat("k", 32)), 0o600))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			dir := t.TempDir()
			backup := newStateWithBackup(t, dir)

			tc.damage(t, dir)

			_, err := resources.Open(t.Context(), dir)
			require.ErrorIs(t, err, resources.ErrCorrupt)
			t.Log(err)
			require.Contains(t, err.Error(), "refusing to start")

			if tc.name == "another key" {
				require.Contains(t, err.Error(), "no good backup")

				return
			}

			require.Contains(t, err.Error(), backup, "the error names the backup to restore")

			restored, err := resources.Restore(dir, backup, time.Now())
			require.NoError(t, err)
			require.Positive(t, restored.Resources)

			if tc.name != "missing" {
				require.FileExists(t, restored.Replaced, "the replaced file is kept")
			}

			st, err := resources.Open(t.Context(), dir)
			require.NoError(t, err)

			t.Cleanup(func() { require.NoError(t, st.Close()) })

			_, err = safe.StateGetByID[*resources.Machine](t.Context(), st, backupMachine)
			require.NoError(t, err, "the restored state holds the machine")
		})
	}
}

func TestRestoreRefuses(t *testing.T) {
	t.Parallel()

	dir := t.TempDir()
	backup := newStateWithBackup(t, dir)

	garbage := filepath.Join(t.TempDir(), "garbage.db")
	require.NoError(t, os.WriteFile(garbage, []byte(strings.Repeat("x", 3*4096)), 0o600))

	_, err := resources.Restore(dir, garbage, time.Now())
	require.ErrorIs(t, err, resources.ErrCorrupt)

	// A backup of another provider's state does not decrypt with this one's key.
	other := t.TempDir()
	otherBackup := newStateWithBackup(t, other)

	_, err = resources.Restore(dir, otherBackup, time.Now())
	require.ErrorContains(t, err, "does not decrypt")

	// While the provider runs, its lock refuses.
	st, err := resources.Open(t.Context(), dir)
	require.NoError(t, err)

	t.Cleanup(func() { require.NoError(t, st.Close()) })

	_, err = resources.Restore(dir, backup, time.Now())
	require.ErrorContains(t, err, "the provider is running")
}

// overwrite fills n bytes of path from off with 0xA5.
func overwrite(t *testing.T, path string, off, n int) {
	t.Helper()

	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	require.NoError(t, err)

	_, err = f.WriteAt([]byte(strings.Repeat("\xa5", n)), int64(off))
	require.NoError(t, err)
	require.NoError(t, f.Close())
}
