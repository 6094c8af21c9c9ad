package inventory_test

import (
	"slices"
	"testing"

	"github.com/cosi-project/runtime/pkg/resource/meta"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/agent/internal/inventory"
)

// TestDefinitions: the state lists exactly the types served, in Talos'
// namespaces, and the definitions and the controllers' outputs are the same types.
func TestDefinitions(t *testing.T) {
	t.Parallel()

	st, err := inventory.NewState(t.Context())
	require.NoError(t, err)

	rds, err := safe.StateListAll[*meta.ResourceDefinition](t.Context(), st)
	require.NoError(t, err)

	got := map[string]string{}
	for rd := range rds.All() {
		got[rd.TypedSpec().Type] = rd.TypedSpec().DefaultNamespace
	}

	assert.Equal(t, map[string]string{
		"ResourceDefinitions.meta.cosi.dev":     "meta",
		"Namespaces.meta.cosi.dev":              "meta",
		"SystemInformations.hardware.talos.dev": "hardware",
		"Processors.hardware.talos.dev":         "hardware",
		"MemoryModules.hardware.talos.dev":      "hardware",
		"PCIDevices.hardware.talos.dev":         "hardware",
		"DiscoveredVolumes.block.talos.dev":     "runtime",
		"Disks.block.talos.dev":                 "runtime",
		"LinkStatuses.net.talos.dev":            "network",
		"AddressStatuses.net.talos.dev":         "network",
		"RouteStatuses.net.talos.dev":           "network",
		"HostnameStatuses.net.talos.dev":        "network",
		"NodeAddresses.net.talos.dev":           "network",
		"KernelCmdlines.runtime.talos.dev":      "runtime",
		"PlatformMetadatas.talos.dev":           "runtime",
	}, got)

	nss, err := safe.StateListAll[*meta.Namespace](t.Context(), st)
	require.NoError(t, err)

	var names []string
	for ns := range nss.All() {
		names = append(names, ns.Metadata().ID())
	}

	slices.Sort(names)
	assert.Equal(t, []string{"hardware", "meta", "network", "runtime"}, names)

	// Both ways: every controller's output is defined, and every inventory definition
	// is some controller's output, so a type is listed only when something fills it.
	outputs := map[string]bool{}

	for _, ctrl := range inventory.NewCollector(st, inventory.Sources{}, nil).Controllers() {
		for _, out := range ctrl.Outputs() {
			assert.Contains(t, got, out.Type, ctrl.Name())

			outputs[out.Type] = true
		}
	}

	for _, rd := range inventory.Definitions() {
		assert.True(t, outputs[rd.ResourceDefinition().Type], "no controller produces %s", rd.ResourceDefinition().Type)
	}
}
