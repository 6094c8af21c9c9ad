package service

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseAgentTalos(t *testing.T) {
	t.Parallel()

	site := []string{"console=ttyS0"}

	// Off: the agent boots from its own assets.
	at, err := parseAgentTalos(DefaultOptions, site)
	require.NoError(t, err)
	assert.Nil(t, at)

	opts := DefaultOptions
	opts.AgentTalosVersion = "v1.13.9"
	opts.AgentTalosExtensions = []string{" siderolabs/bnx2-bnx2x", "", "siderolabs/intel-ice-firmware "}

	at, err = parseAgentTalos(opts, site)
	require.NoError(t, err)
	require.NotNil(t, at)
	assert.Equal(t, "v1.13.9", at.Version)
	assert.Equal(t, []string{"anvil-metal/metal-agent", "siderolabs/bnx2-bnx2x", "siderolabs/intel-ice-firmware"},
		at.Schematic.Customization.SystemExtensions.OfficialExtensions)
	assert.Equal(t, site, at.Schematic.Customization.ExtraKernelArgs)

	opts.AgentTalosExtensionName = "registry.example/anvil/metal-agent"
	at, err = parseAgentTalos(opts, nil)
	require.NoError(t, err)
	assert.Equal(t, "registry.example/anvil/metal-agent", at.Schematic.Customization.SystemExtensions.OfficialExtensions[0])

	for _, tc := range []struct {
		name   string
		change func(*Options)
		err    string
	}{
		{"extensions without a version", func(o *Options) { o.AgentTalosExtensions = []string{"siderolabs/intel-ucode"} },
			"--agent-talos-extensions are extensions of the agent's Talos: they need --agent-talos-version"},
		{"not metal", func(o *Options) { o.AgentTalosVersion, o.TalosPlatform = "v1.13.9", "equinixMetal" }, "needs --talos-platform metal"},
		{"a bad version", func(o *Options) { o.AgentTalosVersion = "1.13" }, "is not a Talos version"},
		{"too old", func(o *Options) { o.AgentTalosVersion = "v1.8.0" }, "has no agent mode"},
		{"Sidero Labs' agent", func(o *Options) {
			o.AgentTalosVersion, o.AgentTalosExtensions = "v1.13.9", []string{"siderolabs/metal-agent"}
		}, "does not speak to Anvil"},
		{"no name for Anvil's", func(o *Options) { o.AgentTalosVersion, o.AgentTalosExtensionName = "v1.13.9", "" }, "is not an extension name"},
	} {
		opts := DefaultOptions
		tc.change(&opts)

		_, err := parseAgentTalos(opts, nil)
		assert.ErrorContains(t, err, tc.err, tc.name)
	}
}
