package control_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/provider/internal/control"
	"github.com/anvil-metal/anvil/provider/internal/transitions"
)

func TestServerSocket(t *testing.T) {
	t.Parallel()

	st := openState(t)

	dir, err := os.MkdirTemp("", "anvil")
	require.NoError(t, err)

	t.Cleanup(func() { os.RemoveAll(dir) })

	socket := filepath.Join(dir, "control.sock")

	// A stale socket, left by a crashed provider, is replaced.
	stale, err := net.ListenUnix("unix", &net.UnixAddr{Name: socket, Net: "unix"})
	require.NoError(t, err)
	stale.SetUnlinkOnClose(false)
	require.NoError(t, stale.Close())

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)

	go func() {
		done <- control.New(st, transitions.New(st, transitions.Options{}), control.Options{SocketPath: socket}).Run(ctx)
	}()

	require.Eventually(t, func() bool {
		conn, err := net.Dial("unix", socket)
		if err == nil {
			conn.Close()
		}

		return err == nil
	}, 5*time.Second, 10*time.Millisecond)

	fi, err := os.Stat(socket)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	// A live socket is not taken over.
	err = control.New(st, transitions.New(st, transitions.Options{}), control.Options{SocketPath: socket}).Run(t.Context())
	require.ErrorContains(t, err, "is in use")

	cancel()
	require.NoError(t, <-done)
	assert.NoFileExists(t, socket)

	// Nor is a file that is not a socket.
	require.NoError(t, os.WriteFile(socket, nil, 0o600))
	err = control.New(st, transitions.New(st, transitions.Options{}), control.Options{SocketPath: socket}).Run(t.Context())
	require.ErrorContains(t, err, "is not a socket")
}
