package anvilctl_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/provider/internal/control"
	"github.com/anvil-metal/anvil/provider/internal/resources"
	"github.com/anvil-metal/anvil/provider/internal/transitions"
)

// TestStateBackupAndRestore backs a running state up through the control API, then
// restores it into a stopped provider's state directory whose state.db was lost.
func TestStateBackupAndRestore(t *testing.T) {
	t.Parallel()

	stateDir, err := os.MkdirTemp("", "anvilctl-state")
	require.NoError(t, err)

	t.Cleanup(func() { os.RemoveAll(stateDir) })

	st, err := resources.Open(t.Context(), stateDir)
	require.NoError(t, err)

	m := resources.NewMachine(m1)
	m.TypedSpec().UUID = m1
	require.NoError(t, st.Create(t.Context(), m))

	socket := filepath.Join(stateDir, "control.sock")
	srv := control.New(st, transitions.New(st, transitions.Options{}), control.Options{SocketPath: socket, StateBackup: st})

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)

	go func() { done <- srv.Run(ctx) }()

	stop := func() {
		if cancel != nil {
			cancel()
			require.NoError(t, <-done)
			require.NoError(t, st.Close())

			cancel = nil
		}
	}

	t.Cleanup(stop)

	require.Eventually(t, func() bool {
		_, err := os.Stat(socket)

		return err == nil
	}, 5*time.Second, 10*time.Millisecond)

	endpoint := "unix://" + socket
	out := filepath.Join(t.TempDir(), "backup.db")

	stdout := mustRun(t, endpoint, "state", "backup", "--out", out)
	require.Contains(t, stdout, "wrote "+out)

	fi, err := os.Stat(out)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	_, errOut, code := run(t, endpoint, "state", "backup", "--out", out)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "exists")

	// While the provider runs, a restore is refused.
	_, errOut, code = run(t, endpoint, "state", "restore", "--state-dir", stateDir, out)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "the provider is running")

	stop()

	require.NoError(t, os.Remove(resources.DBFile(stateDir)))

	stdout = mustRun(t, endpoint, "state", "restore", "--state-dir", stateDir, out)
	require.Contains(t, stdout, "restored "+out)

	st2, err := resources.Open(t.Context(), stateDir)
	require.NoError(t, err)

	t.Cleanup(func() { require.NoError(t, st2.Close()) })

	_, err = safe.StateGetByID[*resources.Machine](t.Context(), st2, m1)
	require.NoError(t, err, "the restored state holds the machine")
}
