package resources

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/resource/meta"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/cosi-project/runtime/pkg/state/impl/inmem"
	"github.com/cosi-project/runtime/pkg/state/impl/namespaced"
	"github.com/cosi-project/runtime/pkg/state/impl/store/bolt"
	"github.com/cosi-project/runtime/pkg/state/registry"
	"go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

const dbFile = "state.db"

// DefaultHistory is how many events of each resource type the state keeps for its
// watchers: a consumer that falls further behind (a rack powering on at once writes
// thousands of events in seconds) gets an overrun and must follow the state again from
// a fresh listing. The history holds the resources of those events, so it costs memory.
const DefaultHistory = 1024

// Option configures Open.
type Option func(*options)

type options struct {
	history    int
	backupKeep int
}

// WithHistory sets how many events of each resource type the state keeps for watchers.
func WithHistory(events int) Option {
	return func(o *options) { o.history = events }
}

// WithBackupKeep sets how many backups the store keeps in its backups directory.
func WithBackupKeep(n int) Option {
	return func(o *options) { o.backupKeep = max(n, 1) }
}

// Store is the provider's resource state: persistent namespaces in BoltDB, the rest in
// memory.
type Store struct {
	state.State

	backing *bolt.BackingStore
	db      *bbolt.DB
	keys    *Keys
	dir     string

	backupKeep int
	backupMu   sync.Mutex
	now        func() time.Time

	// etcdPrefix is the site's prefix of a state on etcd ("" for the embedded store);
	// history bounds its in-memory namespaces' watch histories.
	etcdPrefix string
	history    int
}

// Open opens (creating if needed) the store in dir. The key that encrypts it at rest is
// read from dir, or generated there on first start. A state file that is truncated,
// damaged or does not decrypt, or one missing while backups of it exist, is refused
// with an error naming the backup to restore: the provider never starts empty over a
// state it lost.
func Open(ctx context.Context, dir string, opts ...Option) (*Store, error) {
	o := options{history: DefaultHistory, backupKeep: DefaultBackupKeep}
	for _, opt := range opts {
		opt(&o)
	}

	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("error creating state directory: %w", err)
	}

	keys, err := LoadKeys(dir)
	if err != nil {
		return nil, err
	}

	if err := checkState(dir, keys); err != nil {
		return nil, err
	}

	marshaler := newMarshaler(keys)

	var db *bbolt.DB

	backing, err := bolt.NewBackingStore(func() (*bbolt.DB, error) {
		var err error

		// A timeout turns "another provider holds this state" into an error, not a hang.
		db, err = openGuarded(DBFile(dir), &bbolt.Options{Timeout: 5 * time.Second})

		return db, err
	}, marshaler)
	if err != nil {
		switch {
		case errors.Is(err, berrors.ErrTimeout):
			return nil, fmt.Errorf("error opening state %s: it is locked by another process", dir)
		case errors.Is(err, ErrCorrupt):
			return nil, refusal(dir, keys, err)
		default:
			return nil, fmt.Errorf("error opening state %s: %w", dir, err)
		}
	}

	core := namespaced.NewState(func(ns resource.Namespace) state.CoreState {
		// Histories start small and grow to the bound with use.
		stateOpts := []inmem.StateOption{
			inmem.WithHistoryInitialCapacity(min(128, o.history)),
			inmem.WithHistoryMaxCapacity(o.history),
			inmem.WithHistoryGap(max(o.history/32, 1)),
		}

		if ns == NamespaceName {
			stateOpts = append(stateOpts, inmem.WithBackingStore(backing.WithNamespace(ns)))
		}

		return inmem.NewStateWithOptions(stateOpts...)(ns)
	})

	s := &Store{State: state.WrapCore(core), backing: backing, db: db, keys: keys, dir: dir, backupKeep: o.backupKeep, now: time.Now}

	if err := s.registerDefinitions(ctx); err != nil {
		s.Close()

		return nil, err
	}

	return s, nil
}

// Keys returns the provider's secret keys.
func (s *Store) Keys() *Keys { return s.keys }

// Close closes the database (a state on etcd has none: its client is the caller's).
func (s *Store) Close() error {
	if s.backing == nil {
		return nil
	}

	return s.backing.Close()
}

// Definitions lists every resource type the provider serves.
func Definitions() []meta.ResourceWithRD {
	return []meta.ResourceWithRD{
		&Machine{}, &MachineIntent{}, &MachineStatus{}, &MachineInventory{}, &DHCPLease{}, &Schematic{},
		&BMCConfig{}, &BMCSecret{}, &PowerStatus{}, &MachineLabels{}, &OmniMachine{}, &OmniMachineStatus{}, &OmniJoin{},
	}
}

// registerDefinitions writes namespaces and resource definitions into the meta namespace,
// so that clients (anvilctl) learn types, aliases and columns from the state itself.
func (s *Store) registerDefinitions(ctx context.Context) error {
	namespaces := registry.NewNamespaceRegistry(s.State)
	if err := namespaces.RegisterDefault(ctx); err != nil {
		return fmt.Errorf("error registering namespaces: %w", err)
	}

	for ns, description := range map[resource.Namespace]string{
		NamespaceName:        "Machines, what was asked of them, what was observed, DHCP leases.",
		RuntimeNamespaceName: "What only matters while the provider runs.",
	} {
		if err := namespaces.Register(ctx, ns, description); err != nil {
			return fmt.Errorf("error registering namespace %s: %w", ns, err)
		}
	}

	definitions := registry.NewResourceRegistry(s.State)
	if err := definitions.RegisterDefault(ctx); err != nil {
		return fmt.Errorf("error registering resource definitions: %w", err)
	}

	for _, r := range Definitions() {
		if err := definitions.Register(ctx, r); err != nil {
			return fmt.Errorf("error registering %s: %w", r.ResourceDefinition().Type, err)
		}
	}

	return nil
}

func mustRegister(err error) {
	if err != nil {
		panic(err) // only at init, for a programming error in a spec
	}
}
