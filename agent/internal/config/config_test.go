package config_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/agent/internal/config"
)

const fp = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"

func TestFromCmdline(t *testing.T) {
	t.Parallel()

	c := config.FromCmdline("console=ttyS0 initrd=initramfs-amd64.xz anvil.provider=10.77.0.1:50042 anvil.ca=" + fp +
		" anvil.machine=4c4c4544-0000-1000-8000-000000000001 anvil.token=v1.abc.def quiet")

	assert.Equal(t, config.Config{
		Provider: "10.77.0.1:50042", CAFingerprint: fp, MachineID: "4c4c4544-0000-1000-8000-000000000001", Token: "v1.abc.def",
	}, c)
	require.NoError(t, c.Validate())

	merged := c.Merge(config.Config{Provider: "127.0.0.1:1"})
	assert.Equal(t, "127.0.0.1:1", merged.Provider)
	assert.Equal(t, fp, merged.CAFingerprint)
}

func TestValidate(t *testing.T) {
	t.Parallel()

	err := config.FromCmdline("console=ttyS0 anvil.provider=nope anvil.ca=1234 anvil.token=secret-token").Validate()
	require.Error(t, err)

	for _, want := range []string{"anvil.provider", "anvil.ca", "anvil.machine is missing"} {
		assert.ErrorContains(t, err, want)
	}

	assert.False(t, strings.Contains(err.Error(), "secret-token"), "the token never appears in errors")
}
