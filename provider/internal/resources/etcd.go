package resources

import (
	"context"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/cosi-project/runtime/pkg/state/impl/inmem"
	"github.com/cosi-project/runtime/pkg/state/impl/namespaced"
	"github.com/cosi-project/state-etcd/pkg/state/impl/etcd"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrBackupsOnEtcd is what a backup asked of a state on etcd says: etcd's own snapshots
// (etcdctl snapshot save, or the operator's schedule) back it up.
var ErrBackupsOnEtcd = errors.New("the state is on etcd: back it up with etcd snapshots (etcdctl snapshot save)")

// EtcdClient is what the state needs of an etcd client: its KV (every write a
// transaction) and its watches. A replica's leader runtime passes a fenced KV.
type EtcdClient = etcd.Client

// Etcd keys under a site's prefix.
const (
	// etcdStatePrefix holds the resources: COSI's layout, namespace/type/hashed ID.
	etcdStatePrefix = "/state"
	// etcdKeyCheck holds the fingerprint of the provider key the state is encrypted
	// with: a replica with another key would write what the others cannot read.
	etcdKeyCheck = "/provider-key"
)

// OpenEtcd opens the provider's state on etcd under prefix (one site's, e.g.
// "/anvil/site-a"): the persistent namespace in etcd, encrypted with keys' storage key
// as in the embedded store, resource IDs hashed with a salt derived from the key so that
// machine UUIDs do not appear in etcd's key names; the runtime and meta namespaces in
// this replica's memory. The first replica records the key's fingerprint; one with
// another key is refused before it reads or writes anything.
func OpenEtcd(ctx context.Context, cli EtcdClient, keys *Keys, prefix string, opts ...Option) (*Store, error) {
	o := options{history: DefaultHistory, backupKeep: DefaultBackupKeep}
	for _, opt := range opts {
		opt(&o)
	}

	prefix = strings.TrimSuffix(prefix, "/")
	if !strings.HasPrefix(prefix, "/") {
		return nil, fmt.Errorf("etcd prefix %q must start with /", prefix)
	}

	if err := checkEtcdKey(ctx, cli, keys, prefix); err != nil {
		return nil, err
	}

	s := &Store{keys: keys, etcdPrefix: prefix, history: o.history}
	s.State = state.WrapCore(s.namespaces(cli))

	if err := s.registerDefinitions(ctx); err != nil {
		return nil, err
	}

	return s, nil
}

// Fenced returns the state as a writer through cli sees it: the persistent namespace
// through cli (a KV whose every transaction is fenced by a leader's election key), the
// other namespaces shared with s. Only a store on etcd has one.
func (s *Store) Fenced(cli EtcdClient) (state.State, error) {
	if s.etcdPrefix == "" {
		return nil, errors.New("only a state on etcd can be fenced")
	}

	return state.WrapCore(namespaced.NewState(func(ns resource.Namespace) state.CoreState {
		if ns == NamespaceName {
			return s.etcdState(cli)
		}

		return s.State
	})), nil
}

// OnEtcd says whether the state is on etcd.
func (s *Store) OnEtcd() bool { return s.etcdPrefix != "" }

func (s *Store) namespaces(cli EtcdClient) state.CoreState {
	return namespaced.NewState(func(ns resource.Namespace) state.CoreState {
		if ns == NamespaceName {
			return s.etcdState(cli)
		}

		return inmem.NewStateWithOptions(
			inmem.WithHistoryInitialCapacity(min(128, s.history)),
			inmem.WithHistoryMaxCapacity(s.history),
			inmem.WithHistoryGap(max(s.history/32, 1)),
		)(ns)
	})
}

func (s *Store) etcdState(cli EtcdClient) *etcd.State {
	return etcd.NewState(cli, newMarshaler(s.keys),
		etcd.WithKeyPrefix(s.etcdPrefix+etcdStatePrefix),
		etcd.WithSalt(s.keys.idSalt()))
}

// idSalt is the salt of resource IDs in etcd's key names.
func (k *Keys) idSalt() []byte {
	salt, err := hkdf.Key(sha256.New, k.storage, nil, "anvil etcd id salt", keySize)
	if err != nil {
		panic(err) // only for a length hkdf cannot give; keySize is far below it
	}

	return salt
}

// Fingerprint identifies the provider key without revealing it: every replica of a site
// must show the same.
func (k *Keys) Fingerprint() string {
	mac := hmac.New(sha256.New, k.storage)
	mac.Write([]byte("anvil provider key fingerprint"))

	return hex.EncodeToString(mac.Sum(nil))[:32]
}

// checkEtcdKey records the key's fingerprint under prefix if none is, and refuses a key
// whose fingerprint differs from the recorded one.
func checkEtcdKey(ctx context.Context, cli EtcdClient, keys *Keys, prefix string) error {
	key := prefix + etcdKeyCheck
	mine := keys.Fingerprint()

	resp, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, mine)).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return fmt.Errorf("error checking the provider key against etcd: %w", err)
	}

	if resp.Succeeded {
		return nil // the first replica of this site
	}

	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 1 && string(kvs[0].Value) == mine {
		return nil
	}

	recorded := "(none)"
	if len(kvs) == 1 {
		recorded = string(kvs[0].Value)
	}

	return fmt.Errorf("the provider key (fingerprint %s) is not the one the state under %s in etcd is encrypted with (fingerprint %s): "+
		"every replica needs the same provider.key", mine, prefix, recorded)
}
