package service

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/cosi-project/runtime/pkg/state"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/anvil-metal/anvil/provider/internal/console"
	"github.com/anvil-metal/anvil/provider/internal/pki"
	"github.com/anvil-metal/anvil/provider/internal/replica"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// site is a replica's place among the site's others on etcd; nil for the embedded
// store, where the one provider is its own leader.
type site struct {
	client *clientv3.Client
	// member is this replica's registration among the site's running replicas.
	member   *concurrency.Session
	health   *replica.Health
	election *replica.Election
	metrics  *replica.Metrics
	// term is this replica's current term as leader, nil while it does not lead.
	term atomic.Pointer[replica.Term]
}

// openState opens the state: the embedded store in the state directory, or the site's
// on etcd with the provider CA shared through it.
func openState(ctx context.Context, opts Options, reg prometheus.Registerer, logger *zap.Logger) (*resources.Store, *site, *pki.Authority, error) {
	storeOpts := []resources.Option{resources.WithHistory(opts.StateHistory), resources.WithBackupKeep(opts.StateBackupKeep)}

	switch opts.State {
	case StateBolt, "":
		if len(opts.EtcdEndpoints) > 0 {
			return nil, nil, nil, errors.New("--etcd-endpoints needs --state etcd")
		}

		store, err := resources.Open(ctx, opts.StateDir, storeOpts...)
		if err != nil {
			return nil, nil, nil, err
		}

		ca, err := loadAuthority(opts.StateDir)
		if err != nil {
			store.Close()

			return nil, nil, nil, err
		}

		return store, nil, ca, nil
	case StateEtcd:
	default:
		return nil, nil, nil, fmt.Errorf("--state %q: want %s or %s", opts.State, StateBolt, StateEtcd)
	}

	if err := os.MkdirAll(opts.StateDir, 0o700); err != nil {
		return nil, nil, nil, fmt.Errorf("error creating the state directory: %w", err)
	}

	keys, err := resources.LoadKeys(opts.StateDir)
	if err != nil {
		return nil, nil, nil, err
	}

	cli, err := replica.Dial(replica.ClientConfig{Endpoints: opts.EtcdEndpoints, CA: opts.EtcdCA, Cert: opts.EtcdCert, Key: opts.EtcdKey},
		logger.Named("etcd").WithOptions(zap.IncreaseLevel(zap.WarnLevel)))
	if err != nil {
		return nil, nil, nil, err
	}

	store, err := resources.OpenEtcd(ctx, cli, keys, opts.EtcdPrefix, storeOpts...)
	if err != nil {
		cli.Close()

		return nil, nil, nil, err
	}

	var ca *pki.Authority

	shared := replica.SharedFiles{KV: cli, Prefix: opts.EtcdPrefix, Dir: opts.StateDir, Names: pki.Files(), Keys: keys}
	if err = shared.Share(ctx, func() (err error) {
		ca, err = loadAuthority(opts.StateDir)

		return err
	}); err != nil {
		cli.Close()

		return nil, nil, nil, err
	}

	name := opts.ReplicaName
	if name == "" {
		if name, err = os.Hostname(); err != nil {
			cli.Close()

			return nil, nil, nil, fmt.Errorf("error reading the host name (give --replica-name): %w", err)
		}
	}

	// Checked before anything runs: a site runs one minor version at a time.
	member, err := (&replica.Members{Client: cli, Prefix: opts.EtcdPrefix + "/replicas", TTL: opts.LeaderTTL}).Join(ctx, name, Version)
	if err != nil {
		cli.Close()

		return nil, nil, nil, err
	}

	metrics := replica.NewMetrics(reg)
	s := &site{
		client:  cli,
		member:  member,
		metrics: metrics,
		health:  &replica.Health{Client: cli, Key: opts.EtcdPrefix + "/provider-key", Metrics: metrics, Logger: logger.Named("replica")},
		election: &replica.Election{
			Client: cli, Prefix: opts.EtcdPrefix + "/leader", Name: name, TTL: opts.LeaderTTL, Metrics: metrics, Logger: logger.Named("replica"),
		},
	}

	return store, s, ca, nil
}

// shareConsoleToken makes the console's token hash the site's: the first replica's.
func (s *site) shareConsoleToken(ctx context.Context, opts Options, keys *resources.Keys) (hash [32]byte, created bool, err error) {
	loads := 0
	shared := replica.SharedFiles{KV: s.client, Prefix: opts.EtcdPrefix, Dir: opts.StateDir, Names: []string{console.TokenHashFile}, Keys: keys}

	err = shared.Share(ctx, func() (err error) {
		loads++
		hash, created, err = console.LoadToken(opts.StateDir)

		return err
	})

	if loads > 1 {
		// Another replica's token won: the one made here opens nothing.
		_ = os.Remove(filepath.Join(opts.StateDir, console.TokenFile))
		created = false
	}

	return hash, created, err
}

// mayAct gates the leader's side effects (BMC calls): only while it leads, its lease
// surely alive.
func (s *site) mayAct() error {
	t := s.term.Load()
	if t == nil {
		return errors.New("this replica does not lead")
	}

	return t.MayAct()
}

// lead runs work while this replica leads: on the embedded store at once, for as long
// as ctx; on etcd each time it is elected, on the state fenced by its election.
func (env *environment) lead(ctx context.Context, work func(ctx context.Context, st state.State) error) error {
	if env.site == nil {
		return work(ctx, env.store)
	}

	return env.site.election.Run(ctx, func(ctx context.Context, t *replica.Term) error {
		st, err := env.store.Fenced(t.KV)
		if err != nil {
			return err
		}

		env.site.term.Store(t)
		defer env.site.term.Store(nil)

		return work(ctx, st)
	})
}

// runAll runs the runners until ctx is done or one fails.
func runAll(ctx context.Context, runners []runner) error {
	eg, ctx := errgroup.WithContext(ctx)

	for _, r := range runners {
		eg.Go(func() error {
			if err := r.run(ctx); err != nil {
				return fmt.Errorf("%s: %w", r.name, err)
			}

			return nil
		})
	}

	return eg.Wait()
}
