package control_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	controlv1 "github.com/anvil-metal/anvil/api/control/v1"
	"github.com/anvil-metal/anvil/provider/internal/control"
	"github.com/anvil-metal/anvil/provider/internal/transitions"
)

type backupFunc func(context.Context) (string, error)

func (f backupFunc) Backup(ctx context.Context) (string, error) { return f(ctx) }

// TestBackupState: the backup streams whole, with its size and digest first; a failed
// backup (a full disk) and a provider without backups answer Unavailable with the cause.
func TestBackupState(t *testing.T) {
	t.Parallel()

	content := make([]byte, 2<<20+123) // more than one chunk
	for i := range content {
		content[i] = byte(i)
	}

	file := filepath.Join(t.TempDir(), "state-x.db")
	require.NoError(t, os.WriteFile(file, content, 0o600))

	for _, tc := range []struct {
		name    string
		backup  control.StateBackup
		code    codes.Code
		message string
	}{
		{"streamed", backupFunc(func(context.Context) (string, error) { return file, nil }), codes.OK, ""},
		{"disk full", backupFunc(func(context.Context) (string, error) {
			return "", errors.New("write state.db.tmp: no space left on device")
		}), codes.Unavailable, "no space left on device"},
		{"no backups", nil, codes.Unavailable, "no state backups"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			client := startStateServer(t, tc.backup)

			stream, err := client.BackupState(t.Context(), &controlv1.BackupStateRequest{})
			require.NoError(t, err)

			first, err := stream.Recv()
			if tc.code != codes.OK {
				require.Equal(t, tc.code, status.Code(err), "%v", err)
				require.Contains(t, status.Convert(err).Message(), tc.message)

				return
			}

			require.NoError(t, err)
			require.Equal(t, "state-x.db", first.GetName())
			require.Equal(t, int64(len(content)), first.GetSize())
			require.Len(t, first.GetSha256(), 64)

			var got []byte

			for {
				chunk, err := stream.Recv()
				if err != nil {
					require.ErrorIs(t, err, io.EOF)

					break
				}

				got = append(got, chunk.GetData()...)
			}

			require.Equal(t, content, got)
		})
	}
}

func startStateServer(t *testing.T, backup control.StateBackup) controlv1.StateServiceClient {
	t.Helper()

	st := openState(t)

	dir, err := os.MkdirTemp("", "anvil")
	require.NoError(t, err)

	socket := filepath.Join(dir, "control.sock")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)

	go func() {
		done <- control.New(st, transitions.New(st, transitions.Options{}), control.Options{SocketPath: socket, StateBackup: backup}).Run(ctx)
	}()

	require.Eventually(t, func() bool {
		_, err := os.Stat(socket)

		return err == nil
	}, 5*time.Second, 10*time.Millisecond)

	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)

	t.Cleanup(func() {
		conn.Close()
		cancel()
		require.NoError(t, <-done)
		os.RemoveAll(dir)
	})

	return controlv1.NewStateServiceClient(conn)
}
