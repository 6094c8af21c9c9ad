//go:build lab

package anvilctl_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/anvil-metal/anvil/internal/etcdtest"
	"github.com/anvil-metal/anvil/provider/internal/console"
	"github.com/anvil-metal/anvil/provider/internal/pki"
	"github.com/anvil-metal/anvil/provider/internal/replica"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

const migrateMachines = 1000

// fleetState makes a stopped provider's embedded state of n machines, each with the
// resources a provisioned machine has, some owned by controllers, labelled, annotated,
// held by finalizers or tearing down; and the shared files of its state directory. It
// returns the directory and the machines' IDs.
func fleetState(t *testing.T, n int) (string, []string) {
	t.Helper()

	ctx := t.Context()
	dir := t.TempDir()

	st, err := resources.Open(ctx, dir)
	require.NoError(t, err)

	var ids []string

	for i := range n {
		id := fmt.Sprintf("4c4c4544-0000-1000-8000-%012x", i)
		ids = append(ids, id)

		m := resources.NewMachine(id)
		m.TypedSpec().UUID = id
		m.TypedSpec().MACs = []string{fmt.Sprintf("52:54:00:%02x:%02x:%02x", i>>16&0xff, i>>8&0xff, i&0xff)}
		m.TypedSpec().Arch = "amd64"
		m.TypedSpec().Firmware = "uefi"
		m.TypedSpec().FirstSeen = time.Unix(1_700_000_000+int64(i), 123456789).UTC()
		m.TypedSpec().LastDecision = "agent"

		intent := resources.NewMachineIntent(id)
		intent.TypedSpec().Acceptance = resources.AcceptanceAccepted
		intent.TypedSpec().Power = resources.PowerOn
		intent.TypedSpec().Labels = map[string]string{"rack": fmt.Sprint(i / 40), "row": "b", "zone": "eu-1"}
		intent.Metadata().Labels().Set("anvil.dev/rack", fmt.Sprint(i/40))

		status := resources.NewMachineStatus(id)
		status.TypedSpec().InstalledAllocation = fmt.Sprintf("alloc-%d", i)
		status.TypedSpec().KexecBlockers = []string{"nic"}

		bmc := resources.NewBMCConfig(id)
		bmc.TypedSpec().Kind = "ipmi"
		bmc.TypedSpec().Address = fmt.Sprintf("10.9.%d.%d", i/250, i%250+1)
		bmc.TypedSpec().Port = 623
		bmc.TypedSpec().Username = "anvil"
		bmc.TypedSpec().Source = resources.BMCSourceAgent
		bmc.TypedSpec().HasPassword = true

		secret := resources.NewBMCSecret(id)
		secret.TypedSpec().Password = fmt.Sprintf("secret-%d", i)

		power := resources.NewPowerStatus(id)
		power.TypedSpec().Backend = "ipmi"
		power.TypedSpec().State = resources.PowerOn
		power.TypedSpec().ObservedAt = time.Unix(1_700_000_000, 0).UTC()

		labels := resources.NewMachineLabels(id)
		labels.TypedSpec().Static = map[string]string{"site": "a", "tier": "gold"}
		labels.TypedSpec().Derived = map[string]string{"anvil.dev/arch": "amd64", "anvil.dev/cpus": "64", "anvil.dev/memory": "512Gi"}
		labels.Metadata().Labels().Set("site", "a")
		labels.Metadata().Annotations().Set("anvil.dev/source", "migration test")

		if i%10 == 0 {
			power.Metadata().Finalizers().Add("PowerController")
		}

		for r, owner := range map[resource.Resource]string{
			m: "MachineController", intent: "", status: "MachineStatusController", bmc: "", secret: "",
			power: "PowerController", labels: "MachineLabelsController",
		} {
			require.NoError(t, st.Create(ctx, r, state.WithCreateOwner(owner)))
		}

		if i%100 == 0 {
			_, err := st.Teardown(ctx, power.Metadata(), state.WithTeardownOwner("PowerController"))
			require.NoError(t, err)
		}
	}

	require.NoError(t, st.Close())

	for _, name := range []string{pki.CACertFile, pki.CAKeyFile, pki.AdminCertFile, pki.AdminKeyFile, console.TokenHashFile} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte("the site's "+name+"\n"), 0o600))
	}

	return dir, ids
}

// TestMigrate copies a state of 1,000 machines into a real etcd, refusing first while a
// provider holds the state or leads on the prefix, and finds the same machines there
// through OpenEtcd; a second migration into the same prefix is refused.
func TestMigrate(t *testing.T) {
	cluster := etcdtest.New(t, etcdtest.Config{Members: 1})
	tlsFiles := cluster.TLS()

	var members []string
	for _, ep := range cluster.Endpoints() {
		members = append(members, strings.TrimPrefix(ep, "https://"))
	}

	dir, ids := fleetState(t, migrateMachines)
	before := dirNames(t, dir)

	const prefix = "/anvil/site-a"

	args := func(prefix string) []string {
		return []string{
			"--from", dir, "--to", "etcd://" + strings.Join(members, ","),
			"--etcd-ca", tlsFiles.CA, "--etcd-cert", tlsFiles.Cert, "--etcd-key", tlsFiles.Key, "--etcd-prefix", prefix,
		}
	}

	cli, err := cluster.Client(t.Context())
	require.NoError(t, err)

	t.Cleanup(func() { cli.Close() })

	// A provider holds the state: refused, and etcd is not written.
	live, err := resources.Open(t.Context(), dir)
	require.NoError(t, err)

	_, stderr, code := migrate(t, args(prefix)...)
	require.NoError(t, live.Close())
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "a provider is running on "+dir+": stop it first")
	requireEmpty(t, cli, prefix)

	// No etcd answers: refused after --etcd-timeout, naming the endpoints.
	_, stderr, code = migrate(t, append(args(prefix), "--to", "etcd://127.0.0.1:1", "--etcd-timeout", "1s")...)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "error connecting to etcd at https://127.0.0.1:1")

	// A replica leads on the prefix: refused.
	_, err = cli.Put(t.Context(), "/anvil/site-b/leader/694d9a1b2c3d", "replica-1")
	require.NoError(t, err)

	_, stderr, code = migrate(t, args("/anvil/site-b")...)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "a provider is running on etcd under /anvil/site-b")

	start := time.Now()
	stdout, stderr, code := migrate(t, args(prefix)...)
	took := time.Since(start)

	t.Logf("anvilctl state migrate (%d machines) took %s:\n%s", migrateMachines, took.Round(time.Millisecond), stdout)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, fmt.Sprintf("migrated %d resources of 7 types, 0 differences\n", 7*migrateMachines))
	require.Contains(t, stdout, "copy "+filepath.Join(dir, "provider.key")+" to every replica's --state-dir, mode 0600")
	require.Contains(t, stdout, "--state etcd --etcd-endpoints "+strings.Join(cluster.Endpoints(), ",")+" --etcd-prefix "+prefix)
	require.NotContains(t, stdout+stderr, "secret-1", "no secret is printed")
	assert.Equal(t, before, dirNames(t, dir), "the state directory is left as it was")

	// The replicas' view: OpenEtcd with the state directory's key.
	keys, err := resources.LoadKeys(dir)
	require.NoError(t, err)

	st, err := resources.OpenEtcd(t.Context(), cli, keys, prefix)
	require.NoError(t, err)

	machines, err := safe.StateListAll[*resources.Machine](t.Context(), st)
	require.NoError(t, err)

	var got []string
	for m := range machines.All() {
		got = append(got, m.Metadata().ID())
		require.Equal(t, "MachineController", m.Metadata().Owner())
	}

	slices.Sort(got)
	require.Equal(t, ids, got)

	secret, err := safe.StateGetByID[*resources.BMCSecret](t.Context(), st, ids[7])
	require.NoError(t, err)
	require.Equal(t, "secret-7", secret.TypedSpec().Password)

	power, err := safe.StateGetByID[*resources.PowerStatus](t.Context(), st, ids[100])
	require.NoError(t, err)
	require.Equal(t, resource.PhaseTearingDown, power.Metadata().Phase())
	require.True(t, power.Metadata().Finalizers().Has("PowerController"))

	labels, err := safe.StateGetByID[*resources.MachineLabels](t.Context(), st, ids[3])
	require.NoError(t, err)
	v, _ := labels.Metadata().Labels().Get("site")
	require.Equal(t, "a", v)
	require.Equal(t, "512Gi", labels.TypedSpec().Derived["anvil.dev/memory"])

	// The shared files, as a new replica pulls them.
	replicaDir := t.TempDir()
	files := replica.SharedFiles{KV: cli, Prefix: prefix, Dir: replicaDir, Names: []string{pki.CACertFile, console.TokenHashFile}, Keys: keys}
	require.NoError(t, files.Share(t.Context(), func() error { return nil }))

	ca, err := os.ReadFile(filepath.Join(replicaDir, pki.CACertFile))
	require.NoError(t, err)
	require.Equal(t, "the site's ca.crt\n", string(ca))

	// Machine UUIDs are not etcd's key names.
	resp, err := cli.Get(t.Context(), prefix+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	require.NoError(t, err)

	for _, kv := range resp.Kvs {
		require.NotContains(t, string(kv.Key), "4c4c4544", "a machine UUID in etcd's key %s", kv.Key)
	}

	// A second migration into the prefix is refused: it never merges.
	_, stderr, code = migrate(t, args(prefix)...)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "etcd already holds")
}

func requireEmpty(t *testing.T, cli *clientv3.Client, prefix string) {
	t.Helper()

	resp, err := cli.Get(t.Context(), prefix+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	require.NoError(t, err)
	require.Zero(t, resp.Count, "nothing is written under %s", prefix)
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()

	entries, err := os.ReadDir(dir)
	require.NoError(t, err)

	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}

	return names
}
