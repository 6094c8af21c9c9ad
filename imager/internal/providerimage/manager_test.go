package providerimage_test

import (
	"debug/elf"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/imager/internal/providerimage"
)

// TestManagerImage: the Cluster API manager's image runs its binary as a numeric
// non-root user, is the same on a rebuild, and refuses what it could not run.
func TestManagerImage(t *testing.T) {
	t.Parallel()

	dir := t.TempDir()
	opts := providerimage.ManagerOptions{
		Manager: fakeELF(t, dir, "capi-manager", elf.EM_X86_64, false, "the manager"), Arch: "amd64",
		Version: "v0.1.0", Revision: "0123456789abcdef", Created: time.Unix(created, 0),
	}

	img, err := providerimage.BuildManager(t.Context(), opts)
	require.NoError(t, err)

	cfg, err := img.ConfigFile()
	require.NoError(t, err)
	assert.Equal(t, []string{providerimage.ManagerPath}, cfg.Config.Entrypoint)
	assert.Equal(t, "65532:65532", cfg.Config.User)
	assert.Equal(t, "v0.1.0", cfg.Config.Labels["org.opencontainers.image.version"])
	assert.Equal(t, "amd64", cfg.Architecture)

	again, err := providerimage.BuildManager(t.Context(), opts)
	require.NoError(t, err)

	d1, err := img.Digest()
	require.NoError(t, err)
	d2, err := again.Digest()
	require.NoError(t, err)
	assert.Equal(t, d1, d2, "a rebuild is byte-identical")

	for _, tc := range []struct {
		name   string
		mutate func(*providerimage.ManagerOptions)
		err    string
	}{
		{"dynamic", func(o *providerimage.ManagerOptions) { o.Manager = fakeELF(t, dir, "dyn", elf.EM_X86_64, true, "x") }, "dynamically linked"},
		{"other arch", func(o *providerimage.ManagerOptions) { o.Arch = "arm64" }, "not"},
		{"no version", func(o *providerimage.ManagerOptions) { o.Version = "" }, "needs a version"},
	} {
		bad := opts
		tc.mutate(&bad)

		_, err := providerimage.BuildManager(t.Context(), bad)
		assert.ErrorContains(t, err, tc.err, tc.name)
	}
}
