package replica

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/cosi-project/state-etcd/pkg/state/impl/etcd"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// SharedFiles are files of the state directory every replica of a site must hold alike
// (the provider CA and admin material, the console token's hash), kept in etcd beside
// the state, sealed with the provider key.
type SharedFiles struct {
	KV etcd.Client
	// Prefix is the site's etcd prefix; the files are under Prefix/files/.
	Prefix string
	Dir    string
	Names  []string
	Keys   *resources.Keys
}

// Share makes the files in Dir those of the site. What etcd holds is written into Dir
// first; then load reads the files (making those that are missing, as on a single
// host's first start); then the files etcd lacks are published — the first replica's
// win. A replica that made a file another published first takes that one and loads
// again, so that every replica ends with the same.
func (s *SharedFiles) Share(ctx context.Context, load func() error) error {
	if _, err := s.pull(ctx); err != nil {
		return err
	}

	if err := load(); err != nil {
		return err
	}

	lost, err := s.publish(ctx)
	if err != nil {
		return err
	}

	if !lost {
		return nil
	}

	if _, err := s.pull(ctx); err != nil {
		return err
	}

	return load()
}

func (s *SharedFiles) key(name string) string { return s.Prefix + "/files/" + name }

// pull writes the files etcd holds into Dir; it says how many there were.
func (s *SharedFiles) pull(ctx context.Context) (int, error) {
	n := 0

	for _, name := range s.Names {
		resp, err := s.KV.Get(ctx, s.key(name))
		if err != nil {
			return n, fmt.Errorf("error reading the shared %s from etcd: %w", name, err)
		}

		if len(resp.Kvs) == 0 {
			continue
		}

		data, err := s.Keys.Unseal(resp.Kvs[0].Value)
		if err != nil {
			return n, fmt.Errorf("error decrypting the shared %s from etcd (another provider key?): %w", name, err)
		}

		if err := writeIfChanged(filepath.Join(s.Dir, name), data); err != nil {
			return n, err
		}

		n++
	}

	return n, nil
}

// publish puts into etcd the files it lacks; lost says that another replica published
// one of them first with other content.
func (s *SharedFiles) publish(ctx context.Context) (lost bool, err error) {
	for _, name := range s.Names {
		data, err := os.ReadFile(filepath.Join(s.Dir, name))
		if errors.Is(err, fs.ErrNotExist) {
			continue // not every mode makes every file
		}

		if err != nil {
			return lost, fmt.Errorf("error reading %s to share it: %w", name, err)
		}

		sealed, err := s.Keys.Seal(data)
		if err != nil {
			return lost, fmt.Errorf("error encrypting %s: %w", name, err)
		}

		key := s.key(name)

		resp, err := s.KV.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, string(sealed))).
			Else(clientv3.OpGet(key)).
			Commit()
		if err != nil {
			return lost, fmt.Errorf("error sharing %s through etcd: %w", name, err)
		}

		if resp.Succeeded {
			continue
		}

		theirs, err := s.Keys.Unseal(resp.Responses[0].GetResponseRange().Kvs[0].Value)
		if err != nil {
			return lost, fmt.Errorf("error decrypting the shared %s: %w", name, err)
		}

		lost = lost || !bytes.Equal(theirs, data)
	}

	return lost, nil
}

// writeIfChanged writes data to path (mode 0600) through a temporary file, unless path
// holds it already.
func writeIfChanged(path string, data []byte) error {
	if cur, err := os.ReadFile(path); err == nil && bytes.Equal(cur, data) {
		return nil
	}

	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("error writing %s: %w", path, err)
	}

	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)

		return fmt.Errorf("error writing %s: %w", path, err)
	}

	return nil
}
