//go:build lab

package transitions_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/anvil-metal/anvil/internal/etcdtest"
	"github.com/anvil-metal/anvil/provider/internal/replica"
	"github.com/anvil-metal/anvil/provider/internal/resources"
	"github.com/anvil-metal/anvil/provider/internal/transitions"
)

// Two replicas of a site, each with its own transitions over the shared state on etcd:
// one owner's claims on two machines, made on both replicas at once, leave the owner
// holding one machine, because the site's lock serializes the replicas' transitions
// (replica's TestMutex shows the lock excludes and fences). Without it, the same race
// lets the owner hold two (20 of 20 rounds when this was written): the lock is what
// keeps the rule.
func TestSiteTransitionsKeepOneMachinePerOwner(t *testing.T) {
	c := etcdtest.New(t, etcdtest.Config{Members: 1})
	ctx := t.Context()

	keys, err := resources.DeriveKeys(make([]byte, 32))
	require.NoError(t, err)

	files := c.TLS()

	replicaOf := func(withLock bool) (*transitions.Service, *resources.Store) {
		cli, err := replica.Dial(replica.ClientConfig{Endpoints: c.Endpoints(), CA: files.CA, Cert: files.Cert, Key: files.Key}, zap.NewNop())
		require.NoError(t, err)

		t.Cleanup(func() { cli.Close() })

		store, err := resources.OpenEtcd(ctx, cli, keys, "/anvil/site")
		require.NoError(t, err)

		opts := transitions.Options{}

		if withLock {
			lock := &replica.Mutex{Client: cli, Key: "/anvil/site/locks/transitions", Fenced: store.Fenced}
			t.Cleanup(func() { lock.Close() })

			opts.Locker = lock
		}

		return transitions.New(store, opts), store
	}

	for _, tc := range []struct {
		name     string
		withLock bool
		rounds   int
	}{
		{"site lock", true, 20},
		{"process locks only", false, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, store := replicaOf(tc.withLock)
			b, _ := replicaOf(tc.withLock)

			held := 0

			for round := range tc.rounds {
				owner := fmt.Sprintf("capi/%s-%d", map[bool]string{true: "lock", false: "nolock"}[tc.withLock], round)
				ids := [2]string{}

				for i := range ids {
					ids[i] = fmt.Sprintf("00000000-0000-0000-%04d-%012d", round, i+map[bool]int{true: 0, false: 100}[tc.withLock])

					m := resources.NewMachine(ids[i])
					m.TypedSpec().UUID = ids[i]
					require.NoError(t, store.Create(ctx, m))

					_, err := a.Accept(ctx, ids[i], true)
					require.NoError(t, err)
				}

				var (
					wg  sync.WaitGroup
					won [2]bool
				)

				for i, tr := range []*transitions.Service{a, b} {
					wg.Go(func() {
						_, err := tr.Allocate(ctx, ids[i], transitions.AllocationRequest{TalosVersion: "v1.13.0", Owner: owner})
						won[i] = err == nil
					})
				}

				wg.Wait()

				n := 0

				for _, w := range won {
					if w {
						n++
					}
				}

				require.Positive(t, n, "round %d: neither claim went through", round)

				if n == 2 {
					held++
				}
			}

			if tc.withLock {
				assert.Zero(t, held, "an owner held two machines in %d of %d rounds with the site lock", held, tc.rounds)
			} else {
				t.Logf("without the site lock an owner held two machines in %d of %d rounds", held, tc.rounds)
				assert.Positive(t, held, "the race the site lock closes did not show without it")
			}
		})
	}
}
