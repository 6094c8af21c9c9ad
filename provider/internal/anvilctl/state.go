package anvilctl

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	controlv1 "github.com/anvil-metal/anvil/api/control/v1"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// DefaultStateDir is the provider's state directory unless told otherwise.
const DefaultStateDir = "/var/lib/anvil"

func newStateCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "state",
		Short: "Back up the provider's state while it runs, restore it or move it to etcd while it is stopped",
		Long: `'backup' asks the running provider for a consistent, verified copy of its state
database. 'restore' puts such a copy back into a stopped provider's state directory.
'migrate' copies a stopped provider's embedded state into etcd, for replicas.

A backup holds every machine's state, BMC passwords included, encrypted with the
provider.key of the state directory, which it does not contain: keep provider.key (and
ca.crt, ca.key) backed up with it, and store both where only administrators can read.`,
	}

	cmd.AddCommand(newStateBackupCommand(a), newStateRestoreCommand(), newStateMigrateCommand())

	return cmd
}

func newStateBackupCommand(a *app) *cobra.Command {
	var out string

	cmd := &cobra.Command{
		Use:   "backup",
		Short: "Write a consistent copy of the running provider's state database",
		Long: `Writes a consistent copy of the running provider's state database to --out (mode
0600; default anvil-state-<time>.db in the current directory). The provider verifies the
copy before sending it and keeps it among its own backups (<state-dir>/backups).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				out = "anvil-state-" + time.Now().UTC().Format("20060102T150405Z") + ".db"
			}

			conn, err := a.connect()
			if err != nil {
				return err
			}

			stream, err := controlv1.NewStateServiceClient(conn).BackupState(cmd.Context(), &controlv1.BackupStateRequest{})
			if err != nil {
				return err
			}

			first, err := stream.Recv()
			if err != nil {
				return err
			}

			if err := receiveBackup(out, first, stream); err != nil {
				return err
			}

			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s (%d bytes, sha256 %s; the provider keeps it as %s)\n",
				out, first.GetSize(), first.GetSha256(), first.GetName())

			return nil
		},
	}

	cmd.Flags().StringVarP(&out, "out", "o", "", "file to write (refused if it exists)")

	return cmd
}

// receiveBackup writes the stream's chunks to out through a temporary file, checks the
// size and digest the first message announced, and only then names it out.
func receiveBackup(out string, first *controlv1.BackupStateChunk, stream interface {
	Recv() (*controlv1.BackupStateChunk, error)
},
) error {
	if _, err := os.Lstat(out); err == nil {
		return fmt.Errorf("%s exists: choose another --out", out)
	}

	tmp, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".*.tmp")
	if err != nil {
		return fmt.Errorf("error creating %s: %w", out, err)
	}

	defer os.Remove(tmp.Name()) // after the rename, a no-op

	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()

		return fmt.Errorf("error creating %s: %w", out, err)
	}

	h := sha256.New()
	w := io.MultiWriter(tmp, h)

	var n int64

	for chunk := first; ; {
		k, err := w.Write(chunk.GetData())
		n += int64(k)

		if err != nil {
			tmp.Close()

			return fmt.Errorf("error writing %s: %w", out, err)
		}

		chunk, err = stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}

		if err != nil {
			tmp.Close()

			return err
		}
	}

	if err := tmp.Sync(); err != nil {
		tmp.Close()

		return fmt.Errorf("error writing %s: %w", out, err)
	}

	if err := tmp.Close(); err != nil {
		return fmt.Errorf("error writing %s: %w", out, err)
	}

	if sum := hex.EncodeToString(h.Sum(nil)); n != first.GetSize() || sum != first.GetSha256() {
		return fmt.Errorf("the backup arrived damaged: %d bytes, sha256 %s; expected %d bytes, sha256 %s", n, sum, first.GetSize(), first.GetSha256())
	}

	if err := os.Rename(tmp.Name(), out); err != nil {
		return fmt.Errorf("error writing %s: %w", out, err)
	}

	return nil
}

func newStateRestoreCommand() *cobra.Command {
	var stateDir string

	cmd := &cobra.Command{
		Use:   "restore FILE",
		Short: "Put a state backup back into a stopped provider's state directory",
		Long: `Replaces <state-dir>/state.db with FILE, on the provider's host, while the provider is
stopped (refused while it runs). FILE must be a whole state database that decrypts with
<state-dir>/provider.key; the replaced state.db is kept beside it as
state.db.replaced-<time>.

The provider acts on the restored state when it starts: what happened since the backup
is forgotten (see docs/state.md, "Restoring", before starting it).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkStopped(stateDir); err != nil {
				return err
			}

			restored, err := resources.Restore(stateDir, args[0], time.Now())
			if err != nil {
				return err
			}

			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "restored %s into %s (%d resources)\n", args[0], resources.DBFile(stateDir), restored.Resources)

			if restored.Replaced != "" {
				fmt.Fprintf(w, "the replaced state is kept as %s\n", restored.Replaced)
			}

			return nil
		},
	}

	cmd.Flags().StringVar(&stateDir, "state-dir", DefaultStateDir, "the stopped provider's state directory")

	return cmd
}

func newStateMigrateCommand() *cobra.Command {
	m := migration{writers: 16}

	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Copy a stopped provider's embedded state into etcd, for replicas",
		Long: `Copies the embedded state of a stopped provider (--from, its state directory) into
an empty prefix of an etcd cluster (--to etcd://host:2379,host:2379, spoken to over
mutual TLS only), where replicas started with --state etcd find it.

Refused while a provider runs on the state directory (it holds the state's lock) or on
the etcd prefix (a leader is elected under it), and refused on a prefix that holds
anything at all: a migration never merges into another state.

Every resource keeps its ID, owner, labels, annotations, finalizers, phase and spec;
etcd gives each a new version and creation time. The CA, admin certificate and console
token hash of the state directory are shared through etcd as the replicas share them,
encrypted with the provider key. The copy is then read back from etcd and compared,
resource by resource, with the source; any difference fails the command.

The state directory is not changed, and provider.key is not put into etcd: copy it to
every replica's state directory yourself, as the command says at the end.

Every flag may be given in the environment instead: --etcd-ca as ANVIL_ETCD_CA.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return m.run(cmd.Context(), cmd.OutOrStdout())
		},
	}

	f := cmd.Flags()
	f.StringVar(&m.from, "from", DefaultStateDir, "the stopped provider's state directory")
	f.StringVar(&m.to, "to", "", "the etcd cluster: etcd://host:2379,host:2379 (its members' client endpoints, TLS)")
	f.StringVar(&m.ca, "etcd-ca", "", "CA certificate file of the etcd members")
	f.StringVar(&m.cert, "etcd-cert", "", "etcd client certificate file")
	f.StringVar(&m.key, "etcd-key", "", "etcd client key file")
	f.StringVar(&m.prefix, "etcd-prefix", DefaultEtcdPrefix, "the site's key prefix in etcd (the replicas' --etcd-prefix)")
	f.DurationVar(&m.reachTimeout, "etcd-timeout", 15*time.Second, "how long to wait for etcd to connect and answer")

	return cmd
}

// checkStopped refuses when the provider's control socket in dir answers. The state's
// lock, checked by the restore itself, is the final word; this names the cause sooner.
func checkStopped(dir string) error {
	socket := filepath.Join(dir, "control.sock")

	if _, err := os.Stat(socket); errors.Is(err, fs.ErrNotExist) {
		return nil
	}

	// A stale socket from a crashed provider does not answer.
	if conn, err := net.DialTimeout("unix", socket, time.Second); err == nil {
		conn.Close()

		return fmt.Errorf("the provider is running (%s answers): stop it before restoring", socket)
	}

	return nil
}
