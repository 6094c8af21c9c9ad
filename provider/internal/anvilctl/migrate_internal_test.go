package anvilctl

import (
	"testing"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/provider/internal/resources"
)

func TestParseEtcdURL(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		in   string
		want []string
		err  string
	}{
		{in: "etcd://host1:2379,host2:2379", want: []string{"https://host1:2379", "https://host2:2379"}},
		{in: "etcd://10.0.0.1", want: []string{"https://10.0.0.1:2379"}},
		{in: "etcd://10.0.0.1:12379/", want: []string{"https://10.0.0.1:12379"}},
		{in: "etcd://[fd00::1]:2379,[fd00::2]", want: []string{"https://[fd00::1]:2379", "https://[fd00::2]:2379"}},
		{in: "", err: "--to is required"},
		{in: "etcd://", err: "names no etcd hosts"},
		{in: "etcd:///", err: "names no etcd hosts"},
		{in: "etcd://host1:2379,", err: "a member without a host"},
		{in: "etcd://:2379", err: "a member without a host"},
		{in: "http://host1:2379", err: "over TLS only"},
		{in: "etcd://http://host1:2379", err: "over TLS only"},
		{in: "etcd://https://host1:2379", err: "without a scheme"},
		{in: "https://host1:2379", err: "want etcd://"},
		{in: "host1:2379", err: "want etcd://"},
		{in: "etcd://host1:2379/anvil", err: "without a path"},
		{in: "etcd://host1:http", err: "not a port number"},
		{in: "etcd://host1:70000", err: "not a port number"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()

			got, err := parseEtcdURL(tc.in)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)

				return
			}

			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestCleanPrefix(t *testing.T) {
	t.Parallel()

	p, err := cleanPrefix("/anvil/site-a/")
	require.NoError(t, err)
	assert.Equal(t, "/anvil/site-a", p)

	for _, bad := range []string{"anvil/site-a", "/", ""} {
		_, err := cleanPrefix(bad)
		require.ErrorContains(t, err, "absolute prefix", bad)
	}
}

// TestDifferences: the verification sees every kept part of a resource, the password
// YAML leaves out and the labels' maps in any order included, but not the version or
// creation time etcd gives anew.
func TestDifferences(t *testing.T) {
	t.Parallel()

	const id = "4c4c4544-0000-1000-8000-000000000001"

	secret := func(password string) *resources.BMCSecret {
		s := resources.NewBMCSecret(id)
		s.TypedSpec().Password = password

		return s
	}

	assert.Empty(t, differences(secret("a"), secret("a")))
	assert.Equal(t, []string{"spec"}, differences(secret("a"), secret("b")))

	labels := func(keys ...string) *resources.MachineLabels {
		l := resources.NewMachineLabels(id)
		l.TypedSpec().Static = map[string]string{}

		for _, k := range keys {
			l.TypedSpec().Static[k] = "v"
			l.Metadata().Labels().Set(k, "v")
		}

		return l
	}

	src := labels("a", "b", "c", "d")
	dst := labels("d", "c", "b", "a")
	dst.Metadata().SetVersion(resource.VersionUndefined.Next())
	assert.Empty(t, differences(src, dst))

	dst = labels("a", "b", "c")
	require.NoError(t, dst.Metadata().SetOwner("MachineLabelsController"))
	dst.Metadata().Annotations().Set("x", "y")
	dst.Metadata().Finalizers().Add("PowerController")
	dst.Metadata().SetPhase(resource.PhaseTearingDown)
	assert.Equal(t, []string{"owner", "labels", "annotations", "finalizers", "phase", "spec"}, differences(src, dst))
}
