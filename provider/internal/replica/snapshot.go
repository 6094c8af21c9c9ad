package replica

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.etcd.io/bbolt"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Snapshot files: <dir>/etcd-<time>.db, the newest Keep of them.
const (
	snapshotPrefix = "etcd-"
	snapshotSuffix = ".db"
	snapshotTime   = "20060102T150405.000000000Z"
)

// Snapshots are a site's backups on etcd: the leader takes a snapshot of the etcd
// cluster (the state, sealed as etcd holds it, and the site's shared files) every
// Interval into Dir, checks that it is a whole etcd database, and keeps the newest Keep.
// etcdutl snapshot restore makes a cluster of one again.
type Snapshots struct {
	Client   *clientv3.Client
	Dir      string
	Interval time.Duration
	Keep     int
	Logger   *zap.Logger
}

// Run takes a snapshot now and every Interval until ctx is done; a failed one is logged
// and tried again at the next tick.
func (s *Snapshots) Run(ctx context.Context) error {
	ticker := time.NewTicker(s.Interval)
	defer ticker.Stop()

	for {
		if name, keys, err := s.Take(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}

			s.Logger.Warn("etcd snapshot failed; the previous ones are kept", zap.Error(err))
		} else {
			s.Logger.Info("etcd snapshot taken", zap.String("file", name), zap.Int("keys", keys))
		}

		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// Take writes one snapshot, checks it and prunes the old ones; it returns the file and
// how many keys it holds.
func (s *Snapshots) Take(ctx context.Context) (string, int, error) {
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		return "", 0, fmt.Errorf("error creating the snapshot directory: %w", err)
	}

	name := filepath.Join(s.Dir, snapshotPrefix+time.Now().UTC().Format(snapshotTime)+snapshotSuffix)
	tmp := name + ".tmp"

	keys, err := s.write(ctx, tmp)
	if err != nil {
		os.Remove(tmp)

		return "", 0, err
	}

	if err := os.Rename(tmp, name); err != nil {
		os.Remove(tmp)

		return "", 0, fmt.Errorf("error keeping the etcd snapshot: %w", err)
	}

	return name, keys, s.prune()
}

func (s *Snapshots) write(ctx context.Context, path string) (int, error) {
	rc, err := s.Client.Snapshot(ctx)
	if err != nil {
		return 0, fmt.Errorf("error asking etcd for a snapshot: %w", err)
	}
	defer rc.Close()

	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return 0, fmt.Errorf("error writing the etcd snapshot: %w", err)
	}

	_, err = io.Copy(f, rc)
	if err == nil {
		err = f.Sync()
	}

	if cerr := f.Close(); err == nil {
		err = cerr
	}

	if err != nil {
		return 0, fmt.Errorf("error writing the etcd snapshot: %w", err)
	}

	return CheckSnapshot(path)
}

// CheckSnapshot says how many keys the etcd snapshot at path holds, or why it is not a
// whole etcd database.
func CheckSnapshot(path string) (int, error) {
	db, err := bbolt.Open(path, 0o400, &bbolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return 0, fmt.Errorf("etcd snapshot %s is not a database: %w", path, err)
	}
	defer db.Close()

	keys := 0

	err = db.View(func(tx *bbolt.Tx) error {
		b := tx.Bucket([]byte("key"))
		if b == nil {
			return errors.New("it has no key bucket")
		}

		keys = b.Stats().KeyN

		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("etcd snapshot %s: %w", path, err)
	}

	return keys, nil
}

// prune removes all but the newest Keep snapshots, and temporary files.
func (s *Snapshots) prune() error {
	entries, err := os.ReadDir(s.Dir)
	if err != nil {
		return fmt.Errorf("error listing the snapshots: %w", err)
	}

	var names []string

	for _, e := range entries {
		n := e.Name()

		switch {
		case strings.HasSuffix(n, snapshotSuffix+".tmp"):
			os.Remove(filepath.Join(s.Dir, n))
		case strings.HasPrefix(n, snapshotPrefix) && strings.HasSuffix(n, snapshotSuffix):
			names = append(names, n)
		}
	}

	slices.Sort(names) // by time

	var errs []error

	for len(names) > max(s.Keep, 1) {
		errs = append(errs, os.Remove(filepath.Join(s.Dir, names[0])))
		names = names[1:]
	}

	return errors.Join(errs...)
}
