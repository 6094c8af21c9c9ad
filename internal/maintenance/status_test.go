package maintenance_test

import (
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/extensions"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/stretchr/testify/assert"

	"github.com/anvil-metal/anvil/internal/maintenance"
)

// TestStatuses: how the statuses the package writes are built.
func TestStatuses(t *testing.T) {
	t.Parallel()

	status := maintenance.MachineStatusOf()
	assert.Equal(t, runtimeres.MachineStatusSpec{Stage: runtimeres.MachineStageMaintenance, Status: runtimeres.MachineStatusStatus{Ready: true}}, status)
	assert.Equal(t, 3, int(status.Stage), "Omni's MAINTENANCE")

	for _, tc := range []struct {
		version string
		want    extensions.Metadata
	}{
		{"v0.4.1", extensions.Metadata{Name: "metal-agent", Version: "v0.4.1"}},
		{"dev", extensions.Metadata{Name: "metal-agent", Version: "dev"}},
		{"", extensions.Metadata{Name: "metal-agent"}},
	} {
		ext := maintenance.ExtensionStatusOf(tc.version)

		assert.Equal(t, tc.want.Name, ext.Metadata.Name, "the name Omni looks for, exactly")
		assert.Equal(t, tc.want.Version, ext.Metadata.Version)
		assert.Empty(t, ext.Image, "the agent is no squashfs layer")
	}
}
