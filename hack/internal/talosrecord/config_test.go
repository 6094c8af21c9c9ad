package talosrecord_test

import (
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/hack/internal/talosrecord"
)

// installMode is Talos on metal, not installed yet: what the maintenance API validates
// a config for.
type installMode struct{}

func (installMode) String() string        { return "metal" }
func (installMode) RequiresInstall() bool { return true }
func (installMode) InContainer() bool     { return false }

// TestMakeConfigs: the machine config is valid for an install and names the install,
// the registry and the sink; without its install disk it is not; the event sink config
// is no machine config.
func TestMakeConfigs(t *testing.T) {
	t.Parallel()

	cfgs, err := talosrecord.MakeConfigs(talosrecord.Params{Version: "v1.13.9", Schematic: "abc", Registry: "10.0.2.2:5000", Sink: "10.0.2.2:6000"})
	require.NoError(t, err)

	cfg, err := configloader.NewFromBytes(cfgs.Machine)
	require.NoError(t, err)

	_, err = cfg.Validate(installMode{}) //nolint:staticcheck // Talos' own validation, as its API makes it
	require.NoError(t, err)

	assert.Equal(t, talosrecord.InstallDisk, cfg.Machine().Install().Disk())
	assert.Equal(t, "10.0.2.2:5000/metal-installer/abc:v1.13.9", cfg.Machine().Install().Image())
	assert.Equal(t, "10.0.2.2:6000", *cfg.Runtime().EventsEndpoint())
	assert.NotEmpty(t, cfg.Machine().Security().IssuingCA().Key, "a control plane's config carries the machine CA's key")

	noDisk, err := configloader.NewFromBytes(cfgs.NoInstallDisk)
	require.NoError(t, err)

	_, err = noDisk.Validate(installMode{}) //nolint:staticcheck // Talos' own validation, as its API makes it
	assert.ErrorContains(t, err, "install disk")

	sink, err := configloader.NewFromBytes(cfgs.EventSink)
	require.NoError(t, err)
	assert.Nil(t, sink.RawV1Alpha1())
	assert.Equal(t, "10.0.2.2:6000", *sink.Runtime().EventsEndpoint())
}
