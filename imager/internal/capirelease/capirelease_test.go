package capirelease_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/imager/internal/capirelease"
)

func TestComponents(t *testing.T) {
	t.Parallel()

	dir := t.TempDir()
	for name, content := range map[string]string{
		"crd/b.yaml": "kind: CustomResourceDefinition\nmetadata: {name: b}\n", "crd/a.yaml": "---\nkind: CustomResourceDefinition\nmetadata: {name: a}\n",
		"rbac/role.yaml": "---\nkind: ClusterRole\n", "manager.yaml": "kind: Deployment\nimage: @IMAGE@\n", "metadata.yaml": "kind: Metadata\n",
	} {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
	}

	for _, tc := range []struct {
		name, image, err string
	}{
		{"release", "ghcr.io/anvil-metal/anvil-capi-manager:v0.1.0", ""},
		{"no image", "", "invalid image reference"},
		{"image with a newline", "repo:v1\nkind: Secret", "invalid image reference"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			out, err := capirelease.Components(dir, tc.image)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)

				return
			}

			require.NoError(t, err)
			assert.Equal(t, "---\nkind: CustomResourceDefinition\nmetadata: {name: a}\n"+
				"---\nkind: CustomResourceDefinition\nmetadata: {name: b}\n"+
				"---\nkind: ClusterRole\n"+
				"---\nkind: Deployment\nimage: "+tc.image+"\n", string(out))
		})
	}

	t.Run("write", func(t *testing.T) {
		t.Parallel()

		out := t.TempDir()
		require.NoError(t, capirelease.Write(dir, out, "repo:v1"))

		b, err := os.ReadFile(filepath.Join(out, "metadata.yaml"))
		require.NoError(t, err)
		assert.Equal(t, "kind: Metadata\n", string(b))

		b, err = os.ReadFile(filepath.Join(out, "infrastructure-components.yaml"))
		require.NoError(t, err)
		assert.True(t, strings.HasSuffix(string(b), "image: repo:v1\n"))
	})

	t.Run("no placeholder", func(t *testing.T) {
		t.Parallel()

		bad := t.TempDir()
		require.NoError(t, os.CopyFS(bad, os.DirFS(dir)))
		require.NoError(t, os.WriteFile(filepath.Join(bad, "manager.yaml"), []byte("kind: Deployment\n"), 0o644))

		_, err := capirelease.Components(bad, "repo:v1")
		require.ErrorContains(t, err, "no @IMAGE@")
	})
}
