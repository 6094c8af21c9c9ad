//go:build lab

package etcdtest_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/anvil-metal/anvil/internal/etcdtest"
	"github.com/anvil-metal/anvil/internal/proc"
)

func TestLabClusterPutGet(t *testing.T) {
	t.Parallel()

	c := etcdtest.New(t, etcdtest.Config{})

	eps := c.Endpoints()
	require.Len(t, eps, 3)

	for i, ep := range eps {
		assert.True(t, strings.HasPrefix(ep, "https://127.0.0.1:"), ep)
		assert.Equal(t, ep, c.Endpoint(i))
		assert.True(t, proc.Alive(c.Pid(i)), "member %d runs", i)
		assert.FileExists(t, c.Log(i))
	}

	cli := client(t, c)

	_, err := cli.Put(t.Context(), "anvil/greeting", "hello")
	require.NoError(t, err)

	got, err := cli.Get(t.Context(), "anvil/greeting")
	require.NoError(t, err)
	require.Len(t, got.Kvs, 1)
	assert.Equal(t, "hello", string(got.Kvs[0].Value))

	leader := leaderOf(t, c)
	assert.GreaterOrEqual(t, leader, 0)
	assert.Less(t, leader, 3)
}

func TestLabLeaderKilledPutStillSucceeds(t *testing.T) {
	t.Parallel()

	c := etcdtest.New(t, etcdtest.Config{})
	cli := client(t, c)

	leader := leaderOf(t, c)
	pid := c.Pid(leader)

	require.NoError(t, c.Kill(leader))
	assert.Zero(t, c.Pid(leader))
	assert.False(t, proc.Alive(pid), "the killed leader is gone")

	eventually(t, "a put with the leader killed", func(ctx context.Context) error {
		_, err := cli.Put(ctx, "anvil/after-leader", "still")

		return err
	})

	assert.NotEqual(t, leader, leaderOf(t, c), "another member leads")
}

func TestLabFrozenMemberThawed(t *testing.T) {
	t.Parallel()

	c := etcdtest.New(t, etcdtest.Config{})
	cli := client(t, c)

	frozen := leaderOf(t, c)
	require.NoError(t, c.Freeze(frozen))

	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	_, err := cli.Status(ctx, c.Endpoint(frozen))

	cancel()
	require.Error(t, err, "a frozen member answers nothing")
	assert.True(t, proc.Alive(c.Pid(frozen)), "a frozen member still runs")

	eventually(t, "a put with the leader frozen", func(ctx context.Context) error {
		_, err := cli.Put(ctx, "anvil/while-frozen", "written")

		return err
	})

	require.NoError(t, c.Thaw(frozen))

	// Thawed, it catches up: it reads, by itself, what was written while it was frozen.
	member := memberClient(t, c, frozen)

	eventually(t, "the thawed member's read", func(ctx context.Context) error {
		return readsAlone(ctx, member, "anvil/while-frozen", "written")
	})
}

func TestLabKilledMemberRestartsAndRejoins(t *testing.T) {
	t.Parallel()

	c := etcdtest.New(t, etcdtest.Config{})
	cli := client(t, c)

	const killed = 1

	require.NoError(t, c.Kill(killed))

	eventually(t, "a put with a member down", func(ctx context.Context) error {
		_, err := cli.Put(ctx, "anvil/while-down", "written")

		return err
	})

	require.NoError(t, c.Restart(t.Context(), killed))
	assert.FileExists(t, c.Log(killed)+".1", "the first run's log is kept")

	st, err := cli.Status(t.Context(), c.Endpoint(killed))
	require.NoError(t, err, "the restarted member answers")
	assert.NotZero(t, st.Leader, "and knows the leader")

	member := memberClient(t, c, killed)

	eventually(t, "the restarted member's read", func(ctx context.Context) error {
		return readsAlone(ctx, member, "anvil/while-down", "written")
	})
}

// client is a client of the whole cluster, closed when t ends.
func client(t *testing.T, c *etcdtest.Cluster) *clientv3.Client {
	t.Helper()

	cli, err := c.Client(t.Context())
	require.NoError(t, err)

	t.Cleanup(func() { cli.Close() })

	return cli
}

// memberClient is a client of member i alone, closed when t ends.
func memberClient(t *testing.T, c *etcdtest.Cluster, i int) *clientv3.Client {
	t.Helper()

	tlsConfig, err := c.ClientTLSConfig()
	require.NoError(t, err)

	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{c.Endpoint(i)},
		DialTimeout: 5 * time.Second,
		TLS:         tlsConfig,
		Logger:      zap.NewNop(),
	})
	require.NoError(t, err)

	t.Cleanup(func() { cli.Close() })

	return cli
}

// readsAlone reads key from cli's member's own store (serializable: no quorum asked)
// and wants value.
func readsAlone(ctx context.Context, cli *clientv3.Client, key, value string) error {
	got, err := cli.Get(ctx, key, clientv3.WithSerializable())
	if err != nil {
		return err
	}

	if len(got.Kvs) != 1 || string(got.Kvs[0].Value) != value {
		return fmt.Errorf("%s is %v, not %q yet", key, got.Kvs, value)
	}

	return nil
}

// leaderOf is the leader's index, once the members agree on one.
func leaderOf(t *testing.T, c *etcdtest.Cluster) int {
	t.Helper()

	leader := -1

	eventually(t, "the leader", func(ctx context.Context) error {
		var err error

		leader, err = c.Leader(ctx)

		return err
	})

	return leader
}

// eventually calls try, each call bounded by 2 s, until it succeeds: up to 100 times and
// 30 s in all.
func eventually(t *testing.T, what string, try func(ctx context.Context) error) {
	t.Helper()

	start := time.Now()

	var err error

	for n := 1; n <= 100 && time.Since(start) < 30*time.Second; n++ {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		err = try(ctx)

		cancel()

		if err == nil {
			t.Logf("%s: after %d tries, %s", what, n, time.Since(start).Round(time.Millisecond))

			return
		}

		time.Sleep(100 * time.Millisecond)
	}

	t.Fatalf("%s: no success within 100 tries and 30 s: %v", what, err)
}
