package configpatch_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/anvil-metal/anvil/internal/disksel"
	"github.com/anvil-metal/anvil/provider/internal/configpatch"
)

func TestWithProviderID(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name, in, err string
	}{
		{"worker", "version: v1alpha1\nmachine:\n  type: worker\n", ""},
		{"with kubelet args", "version: v1alpha1\nmachine:\n  type: controlplane\n  kubelet:\n    extraArgs:\n      rotate-server-certificates: \"true\"\n", ""},
		{"multi-document", "version: v1alpha1\nmachine:\n  type: worker\n---\napiVersion: v1alpha1\nkind: HostnameConfig\nhostname: node-1\n", ""},
		{"null kubelet", "version: v1alpha1\nmachine:\n  type: worker\n  kubelet:\n", ""},
		{"provider-id replaced", "version: v1alpha1\nmachine:\n  type: worker\n  kubelet:\n    extraArgs:\n      provider-id: other://1\n", ""},
		{"newer Talos fields", "version: v1alpha1\nmachine:\n  type: worker\n  futureField: {a: 1}\n---\napiVersion: v1alpha9\nkind: FutureConfig\nsecret: s3cret\n", ""},
		{"document start marker", "---\nversion: v1alpha1\nmachine:\n  type: worker\n", ""},
		{"not a machine config", "hello: world\n", "no v1alpha1 document"},
		{"kubelet not a mapping", "version: v1alpha1\nmachine:\n  type: worker\n  kubelet: s3cret\n", "machine.kubelet is not a mapping"},
		{"not YAML", "version: v1alpha1\nmachine: {type: s3cret\n", "document 1 is not YAML"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			out, err := configpatch.WithProviderID([]byte(tc.in), "anvil://1234")
			if tc.err != "" {
				require.ErrorIs(t, err, configpatch.ErrNotMachineConfig)
				require.ErrorContains(t, err, tc.err)
				assert.NotContains(t, err.Error(), "s3cret", "the data is never quoted")

				return
			}

			require.NoError(t, err)

			var doc struct {
				Machine struct {
					Type    string `yaml:"type"`
					Kubelet struct {
						ExtraArgs map[string]any `yaml:"extraArgs"`
					} `yaml:"kubelet"`
				} `yaml:"machine"`
			}
			require.NoError(t, yaml.Unmarshal(out, &doc))
			assert.Equal(t, "anvil://1234", doc.Machine.Kubelet.ExtraArgs["provider-id"])
			assert.NotEmpty(t, doc.Machine.Type, "the rest is kept")

			if tc.name == "with kubelet args" {
				assert.Equal(t, "true", doc.Machine.Kubelet.ExtraArgs["rotate-server-certificates"])
			}

			if tc.name == "multi-document" {
				assert.True(t, strings.HasSuffix(string(out), "\n---\napiVersion: v1alpha1\nkind: HostnameConfig\nhostname: node-1\n"), "other documents kept byte for byte:\n%s", out)
			}

			if tc.name == "newer Talos fields" {
				assert.Contains(t, string(out), "futureField", "fields the manager does not know pass")
				assert.True(t, strings.HasSuffix(string(out), "\n---\napiVersion: v1alpha9\nkind: FutureConfig\nsecret: s3cret\n"), "%s", out)
			}
		})
	}
}

// TestWithInstallDisk: the install disk goes in by its serial or WWID, replacing a disk
// the config named by kernel name and any selector of its own; the other documents stay
// byte for byte.
func TestWithInstallDisk(t *testing.T) {
	t.Parallel()

	const hostname = "\n---\napiVersion: v1alpha1\nkind: HostnameConfig\nhostname: node-1\n"

	for _, tc := range []struct {
		name, in string
		id       disksel.Identity
		want     map[string]string
		err      string
	}{
		{
			name: "no install section", in: "version: v1alpha1\nmachine:\n  type: worker\n",
			id: disksel.Identity{Serial: "S64FNE0R801234"}, want: map[string]string{"serial": "S64FNE0R801234"},
		},
		{
			name: "a disk by kernel name goes", in: "version: v1alpha1\nmachine:\n  type: worker\n  install:\n    disk: /dev/sda\n    image: factory.talos.dev/installer/abc:v1.13.0\n" + hostname,
			id: disksel.Identity{WWID: "naa.5000c500c9a1b2c3"}, want: map[string]string{"wwid": "naa.5000c500c9a1b2c3"},
		},
		{
			name: "the config's own selector is replaced", in: "version: v1alpha1\nmachine:\n  install:\n    diskSelector:\n      size: '>= 1TB'\n      type: hdd\n",
			id: disksel.Identity{Serial: "S1"}, want: map[string]string{"serial": "S1"},
		},
		{name: "install not a mapping", in: "version: v1alpha1\nmachine:\n  install: s3cret\n", id: disksel.Identity{Serial: "S1"}, err: "machine.install is not a mapping"},
		{name: "no identity", in: "version: v1alpha1\n", err: "without a serial or WWID"},
		{name: "not a machine config", in: "hello: world\n", id: disksel.Identity{Serial: "S1"}, err: "no v1alpha1 document"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			out, err := configpatch.WithInstallDisk([]byte(tc.in), tc.id)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				assert.NotContains(t, err.Error(), "s3cret", "the data is never quoted")

				return
			}

			require.NoError(t, err)

			var doc struct {
				Machine struct {
					Install map[string]any `yaml:"install"`
				} `yaml:"machine"`
			}
			require.NoError(t, yaml.Unmarshal(out, &doc))

			assert.NotContains(t, doc.Machine.Install, "disk", "no kernel name")

			selector, ok := doc.Machine.Install["diskSelector"].(map[string]any)
			require.True(t, ok, "%s", out)

			got := map[string]string{}
			for k, v := range selector {
				got[k], _ = v.(string)
			}

			assert.Equal(t, tc.want, got, "the identity alone")

			if strings.Contains(tc.in, "image:") {
				assert.Equal(t, "factory.talos.dev/installer/abc:v1.13.0", doc.Machine.Install["image"], "the rest of install is kept")
				assert.True(t, strings.HasSuffix(string(out), hostname), "other documents kept byte for byte:\n%s", out)
			}
		})
	}
}
