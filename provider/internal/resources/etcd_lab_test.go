//go:build lab

package resources_test

import (
	"strings"
	"testing"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/anvil-metal/anvil/internal/etcdtest"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// The state on etcd: resources round-trip; etcd sees neither machine IDs in its key
// names nor secrets in its values; a replica with another provider key is refused before
// it reads or writes a resource.
func TestStateOnEtcd(t *testing.T) {
	c := etcdtest.New(t, etcdtest.Config{Members: 1})
	ctx := t.Context()

	cli, err := c.Client(ctx)
	require.NoError(t, err)

	t.Cleanup(func() { cli.Close() })

	master := make([]byte, 32)
	master[0] = 1

	keys, err := resources.DeriveKeys(master)
	require.NoError(t, err)

	store, err := resources.OpenEtcd(ctx, cli, keys, "/anvil/site-a")
	require.NoError(t, err)

	const id = "4c4c4544-0035-4b10-8031-b4c04f4a5a31"

	secret := resources.NewBMCSecret(id)
	secret.TypedSpec().Password = "hunter2-bmc-password"
	require.NoError(t, store.Create(ctx, secret))

	got, err := safe.StateGetByID[*resources.BMCSecret](ctx, store, id)
	require.NoError(t, err)
	assert.Equal(t, "hunter2-bmc-password", got.TypedSpec().Password)

	all, err := cli.Get(ctx, "/anvil/site-a/", clientv3.WithPrefix())
	require.NoError(t, err)
	require.NotEmpty(t, all.Kvs)

	for _, kv := range all.Kvs {
		assert.NotContains(t, string(kv.Key), id, "a machine ID in an etcd key name")
		assert.NotContains(t, string(kv.Value), "hunter2", "a secret in the clear in etcd")
		assert.NotContains(t, string(kv.Value), id, "a machine ID in the clear in etcd")
	}

	// Another site on the same cluster is another state.
	other, err := resources.OpenEtcd(ctx, cli, keys, "/anvil/site-b")
	require.NoError(t, err)

	list, err := safe.StateListAll[*resources.BMCSecret](ctx, other)
	require.NoError(t, err)
	assert.Zero(t, list.Len())

	// A replica with another key: refused, naming both fingerprints, before any read.
	master[0] = 2
	wrong, err := resources.DeriveKeys(master)
	require.NoError(t, err)

	_, err = resources.OpenEtcd(ctx, cli, wrong, "/anvil/site-a")
	require.Error(t, err)
	assert.ErrorContains(t, err, keys.Fingerprint())
	assert.ErrorContains(t, err, wrong.Fingerprint())
	assert.True(t, strings.Contains(err.Error(), "every replica needs the same provider.key"))

	// A bad prefix is refused.
	_, err = resources.OpenEtcd(ctx, cli, keys, "anvil")
	assert.ErrorContains(t, err, "must start with /")
}
