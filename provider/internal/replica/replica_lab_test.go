//go:build lab

package replica_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/anvil-metal/anvil/internal/etcdtest"
	"github.com/anvil-metal/anvil/provider/internal/replica"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

const prefix = "/anvil/test"

// cluster starts one etcd member for the test.
func cluster(t *testing.T) *etcdtest.Cluster {
	t.Helper()

	return etcdtest.New(t, etcdtest.Config{Members: 1})
}

func dial(t *testing.T, c *etcdtest.Cluster) *clientv3.Client {
	t.Helper()

	files := c.TLS()

	cli, err := replica.Dial(replica.ClientConfig{Endpoints: c.Endpoints(), CA: files.CA, Cert: files.Cert, Key: files.Key}, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	require.NoError(t, err)

	t.Cleanup(func() { cli.Close() })

	return cli
}

func keys(t *testing.T) *resources.Keys {
	t.Helper()

	k, err := resources.DeriveKeys(make([]byte, 32))
	require.NoError(t, err)

	return k
}

// candidate runs an election for name until stopped, telling each term it gets.
type candidate struct {
	terms chan *replica.Term
	stop  context.CancelFunc
	done  chan struct{}
}

func campaign(t *testing.T, cli *clientv3.Client, name string, ttl time.Duration, metrics *replica.Metrics) *candidate {
	t.Helper()

	ctx, stop := context.WithCancel(t.Context())
	c := &candidate{terms: make(chan *replica.Term, 4), stop: stop, done: make(chan struct{})}
	e := &replica.Election{Client: cli, Prefix: prefix + "/leader", Name: name, TTL: ttl, Metrics: metrics, Logger: zaptest.NewLogger(t).Named(name)}

	go func() {
		defer close(c.done)

		assert.NoError(t, e.Run(ctx, func(ctx context.Context, term *replica.Term) error {
			c.terms <- term
			<-ctx.Done()

			return nil
		}))
	}()

	t.Cleanup(func() { stop(); <-c.done })

	return c
}

func elected(t *testing.T, c *candidate, within time.Duration) *replica.Term {
	t.Helper()

	select {
	case term := <-c.terms:
		return term
	case <-time.After(within):
		t.Fatalf("not elected within %s", within)

		return nil
	}
}

// A deposed leader's writes are refused by etcd itself: the fenced state of the term it
// lost fails a write after another replica was elected, which the same write through the
// unfenced state (what a check in Go would let through) does not.
func TestDeposedLeaderWriteRefusedInsideEtcd(t *testing.T) {
	c := cluster(t)
	ctx := t.Context()
	k := keys(t)

	cliA, cliB := dial(t, c), dial(t, c)

	store, err := resources.OpenEtcd(ctx, cliA, k, prefix)
	require.NoError(t, err)

	a := campaign(t, cliA, "a", 3*time.Second, nil)
	termA := elected(t, a, 30*time.Second)

	fencedA, err := store.Fenced(termA.KV)
	require.NoError(t, err)

	require.NoError(t, fencedA.Create(ctx, resources.NewMachineLabels("m1")))

	b := campaign(t, cliB, "b", 3*time.Second, nil)

	// A is cut off: its lease revoked (as etcd does when it expires), its key gone.
	leaderKey, err := cliB.Get(ctx, termA.Key)
	require.NoError(t, err)
	require.Len(t, leaderKey.Kvs, 1)
	_, err = cliB.Revoke(ctx, clientv3.LeaseID(leaderKey.Kvs[0].Lease))
	require.NoError(t, err)

	termB := elected(t, b, 30*time.Second)
	assert.NotEqual(t, termA.Rev, termB.Rev)

	// A's late writes, as a leader runtime mid-reconcile would make them.
	late := resources.NewMachineLabels("m2")
	err = fencedA.Create(ctx, late)
	require.Error(t, err)
	assert.ErrorIs(t, err, replica.ErrFenced)

	cur, err := safe.StateGetByID[*resources.MachineLabels](ctx, store, "m1")
	require.NoError(t, err)

	cur.TypedSpec().User = map[string]string{"late": "write"}
	assert.ErrorIs(t, fencedA.Update(ctx, cur), replica.ErrFenced)
	assert.ErrorIs(t, fencedA.Destroy(ctx, cur.Metadata()), replica.ErrFenced)

	// Nothing of them reached etcd.
	_, err = store.Get(ctx, late.Metadata())
	assert.True(t, state.IsNotFoundError(err), "the refused create is not in etcd: %v", err)

	cur, err = safe.StateGetByID[*resources.MachineLabels](ctx, store, "m1")
	require.NoError(t, err)
	assert.Empty(t, cur.TypedSpec().User)

	// The new leader writes through its own term.
	fencedB, err := store.Fenced(termB.KV)
	require.NoError(t, err)
	require.NoError(t, fencedB.Create(ctx, resources.NewMachineLabels("m3")))

	// Without the fence the same late write goes through: the fence is what refused.
	require.NoError(t, store.Create(ctx, late))

}

// A graceful stop resigns: the standby is elected at once, not after the lease's TTL.
func TestGracefulStopHandsOver(t *testing.T) {
	c := cluster(t)

	a := campaign(t, dial(t, c), "a", 10*time.Second, nil)
	elected(t, a, 30*time.Second)

	b := campaign(t, dial(t, c), "b", 10*time.Second, nil)

	start := time.Now()

	a.stop()
	<-a.done

	elected(t, b, 30*time.Second)
	t.Logf("takeover after a graceful stop: %s (lease TTL 10s)", time.Since(start).Round(time.Millisecond))
}

// A leader whose process dies (no resignation, no revocation) is replaced once its
// lease expires.
func TestDeadLeaderReplacedAfterTTL(t *testing.T) {
	c := cluster(t)

	files := c.TLS()
	cliA, err := replica.Dial(replica.ClientConfig{Endpoints: c.Endpoints(), CA: files.CA, Cert: files.Cert, Key: files.Key}, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	require.NoError(t, err)

	a := campaign(t, cliA, "a", 3*time.Second, nil)
	termA := elected(t, a, 30*time.Second)

	b := campaign(t, dial(t, c), "b", 3*time.Second, nil)

	// The process dies: its connection to etcd goes, and with it every renewal; its
	// election loop can no longer resign or revoke.
	start := time.Now()

	require.NoError(t, cliA.Close())

	termB := elected(t, b, 30*time.Second)
	assert.NotEqual(t, termA.Key, termB.Key)
	t.Logf("takeover after the leader died: %s (lease TTL 3s)", time.Since(start).Round(time.Millisecond))
}

// A leader stops acting (MayAct errs) before its lease can have expired once etcd stops
// renewing it, and well before another replica could be elected.
func TestMayActStopsBeforeTheLeaseExpires(t *testing.T) {
	c := cluster(t)

	a := campaign(t, dial(t, c), "a", 4*time.Second, nil)
	term := elected(t, a, 30*time.Second)

	require.NoError(t, term.MayAct())

	require.NoError(t, c.Freeze(0))
	frozen := time.Now()

	t.Cleanup(func() { _ = c.Thaw(0) })

	deadline := time.Now().Add(30 * time.Second)
	for term.MayAct() == nil && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}

	stopped := time.Since(frozen)
	require.Error(t, term.MayAct(), "still acting 30 s after etcd stopped answering")
	t.Logf("stopped acting %s after etcd stopped renewing (lease TTL 4s)", stopped.Round(time.Millisecond))
	// The lease can only have expired a TTL after its last renewal, which was before the
	// freeze: stopping before the TTL has passed since the freeze is stopping in time.
	assert.Less(t, stopped, 4*time.Second, "the gate must close before the lease can expire")
}

// The health goes unready when etcd stops answering, and ready again when it answers.
func TestHealthFollowsEtcd(t *testing.T) {
	c := cluster(t)

	h := &replica.Health{Client: dial(t, c), Key: prefix + "/provider-key", StaleAfter: 2 * time.Second, Logger: zaptest.NewLogger(t)}

	ctx, stop := context.WithCancel(t.Context())
	done := make(chan struct{})

	go func() { defer close(done); _ = h.Run(ctx) }()

	t.Cleanup(func() { stop(); <-done })

	eventually(t, "ready", func() error { return h.Ready() })

	require.NoError(t, c.Freeze(0))

	eventually(t, "unready while etcd is frozen", func() error {
		if h.Ready() == nil {
			return errors.New("still ready")
		}

		return nil
	})

	require.NoError(t, c.Thaw(0))
	eventually(t, "ready again", func() error { return h.Ready() })
}

// Replicas share the state directory's secrets: the first one's files reach the others;
// two made at once end as one, the first published.
func TestSharedFilesEndAlike(t *testing.T) {
	c := cluster(t)
	ctx := t.Context()
	k := keys(t)
	cli := dial(t, c)

	dirA, dirB, dirC := t.TempDir(), t.TempDir(), t.TempDir()
	names := []string{"ca.crt", "ca.key"}

	makeFiles := func(dir, content string) func() error {
		return func() error {
			for _, n := range names {
				path := filepath.Join(dir, n)
				if _, err := os.Stat(path); err == nil {
					continue // loaded, not made: as pki.Load would
				}

				if err := os.WriteFile(path, []byte(content+n), 0o600); err != nil {
					return err
				}
			}

			return nil
		}
	}

	share := func(dir string) replica.SharedFiles {
		return replica.SharedFiles{KV: cli, Prefix: prefix, Dir: dir, Names: names, Keys: k}
	}

	sa := share(dirA)
	require.NoError(t, sa.Share(ctx, makeFiles(dirA, "a-")))

	sb := share(dirB)
	require.NoError(t, sb.Share(ctx, makeFiles(dirB, "b-")))

	for _, n := range names {
		got, err := os.ReadFile(filepath.Join(dirB, n))
		require.NoError(t, err)
		assert.Equal(t, "a-"+n, string(got), "the second replica holds the first one's %s", n)
	}

	// C made its own before it could pull (a race with A): A's win.
	require.NoError(t, makeFiles(dirC, "c-")())

	sc := share(dirC)
	require.NoError(t, sc.Share(ctx, makeFiles(dirC, "c-")))

	for _, n := range names {
		got, err := os.ReadFile(filepath.Join(dirC, n))
		require.NoError(t, err)
		assert.Equal(t, "a-"+n, string(got))
	}

	// What etcd holds is sealed: no file's content in the clear.
	resp, err := cli.Get(ctx, prefix+"/files/", clientv3.WithPrefix())
	require.NoError(t, err)
	require.Len(t, resp.Kvs, len(names))

	for _, kv := range resp.Kvs {
		assert.NotContains(t, string(kv.Value), "a-ca")
	}
}

func eventually(t *testing.T, what string, f func() error) {
	t.Helper()

	deadline := time.Now().Add(30 * time.Second)

	var err error
	for time.Now().Before(deadline) {
		if err = f(); err == nil {
			return
		}

		time.Sleep(100 * time.Millisecond)
	}

	t.Fatalf("%s: not within 30 s: %v", what, err)
}

// The site's mutex excludes: a second replica's Lock waits for the first's unlock; and it
// fences: a holder whose session ended (a pause past its lease) has its late writes refused
// once another replica holds the lock.
func TestMutex(t *testing.T) {
	c := cluster(t)
	ctx := t.Context()
	k := keys(t)

	cliA, cliB := dial(t, c), dial(t, c)

	store, err := resources.OpenEtcd(ctx, cliA, k, prefix)
	require.NoError(t, err)

	lockOf := func(cli *clientv3.Client) *replica.Mutex {
		m := &replica.Mutex{Client: cli, Key: prefix + "/locks/test", TTL: 3 * time.Second, Fenced: store.Fenced}
		t.Cleanup(func() { m.Close() })

		return m
	}

	a, b := lockOf(cliA), lockOf(cliB)

	stA, unlockA, err := a.Lock(ctx)
	require.NoError(t, err)
	require.NoError(t, stA.Create(ctx, resources.NewMachineLabels("m1")))

	// B waits while A holds.
	got := make(chan func(), 1)

	go func() {
		_, unlock, err := b.Lock(ctx)
		assert.NoError(t, err)
		got <- unlock
	}()

	select {
	case <-got:
		t.Fatal("B took the lock A holds")
	case <-time.After(time.Second):
	}

	unlockA()

	var unlockB func()
	select {
	case unlockB = <-got:
	case <-time.After(30 * time.Second):
		t.Fatal("B did not get the lock after A unlocked")
	}

	unlockB()

	// A takes it again, then its session's lease is gone (as after a pause past its TTL):
	// B takes the lock, and A's late write is refused by etcd.
	stA, _, err = a.Lock(ctx)
	require.NoError(t, err)
	require.NoError(t, a.Close()) // revokes A's lease: its hold is gone

	stB, unlockB, err := b.Lock(ctx)
	require.NoError(t, err)

	defer unlockB()

	assert.ErrorIs(t, stA.Create(ctx, resources.NewMachineLabels("late")), replica.ErrFenced)
	require.NoError(t, stB.Create(ctx, resources.NewMachineLabels("m2")))
}

// A site runs one minor version at a time: a replica of another minor version is
// refused while one runs, a patch version joins; a name a running replica holds is
// refused, and a replica started again right after it died waits out its former
// registration and joins.
func TestMembersOneMinorVersion(t *testing.T) {
	c := cluster(t)
	ctx := t.Context()
	cli := dial(t, c)

	m := &replica.Members{Client: cli, Prefix: prefix + "/replicas", TTL: 2 * time.Second}

	r0, err := m.Join(ctx, "r0", "v1.4.0")
	require.NoError(t, err)

	r1, err := m.Join(ctx, "r1", "v1.4.3")
	require.NoError(t, err, "a patch version joins")

	_, err = m.Join(ctx, "r2", "v1.5.0")
	require.ErrorContains(t, err, "a site runs one minor version at a time")

	running, err := m.Running(ctx)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"r0": "v1.4.0", "r1": "v1.4.3"}, running)

	_, err = m.Join(ctx, "r1", "v1.4.3")
	require.ErrorContains(t, err, `another running replica of this site is named "r1"`)

	// r0 dies (its lease is not revoked): started again at once, it waits out the old
	// registration.
	r0.Orphan()

	again, err := m.Join(ctx, "r0", "v1.4.0")
	require.NoError(t, err)

	// Every replica stopped: the new minor version starts.
	require.NoError(t, again.Close())
	require.NoError(t, r1.Close())

	_, err = m.Join(ctx, "r0", "v1.5.0")
	require.NoError(t, err)
}

// The leader's backups on etcd: snapshots of the cluster, each checked to be a whole
// etcd database holding the site's keys, the newest Keep kept.
func TestSnapshots(t *testing.T) {
	c := cluster(t)
	ctx := t.Context()
	cli := dial(t, c)

	store, err := resources.OpenEtcd(ctx, cli, keys(t), prefix)
	require.NoError(t, err)
	require.NoError(t, store.Create(ctx, resources.NewMachineLabels("m1")))

	s := &replica.Snapshots{Client: cli, Dir: t.TempDir(), Interval: time.Hour, Keep: 2, Logger: zaptest.NewLogger(t)}

	var names []string

	for range 3 {
		name, n, err := s.Take(ctx)
		require.NoError(t, err)
		assert.Positive(t, n, "the snapshot holds the site's keys")

		names = append(names, name)
	}

	left, err := filepath.Glob(filepath.Join(s.Dir, "*"))
	require.NoError(t, err)
	assert.Equal(t, names[1:], left, "the newest two kept")
}
