package anvilctl_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// TestOmniView: in Omni mode, get machines shows Omni's view of each machine beside
// Anvil's — a column in the table, the whole in YAML with the node unique token
// redacted; a machine Omni does not have shows "-".
func TestOmniView(t *testing.T) {
	t.Parallel()

	endpoint, st := startServerState(t)

	out := mustRun(t, endpoint, "get", "machines")
	assert.NotContains(t, out, "OMNI", "standalone: no Omni column")

	om := resources.NewOmniMachine(m1)
	om.TypedSpec().Acceptance = resources.AcceptanceAccepted
	om.TypedSpec().ClusterTalosVersion = "v1.9.0"
	om.TypedSpec().NodeUniqueToken = `{"Fingerprint":"f","Token":"secret-token"}`
	require.NoError(t, st.Create(t.Context(), om))

	out = mustRun(t, endpoint, "get", "machines")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 3, out)
	assert.Contains(t, lines[0], "OMNI")

	for _, l := range lines[1:] {
		switch {
		case strings.HasPrefix(l, m1):
			assert.True(t, strings.HasSuffix(strings.TrimSpace(l), "accepted cluster v1.9.0"), l)
		case strings.HasPrefix(l, m2):
			assert.True(t, strings.HasSuffix(strings.TrimSpace(l), "-"), l)
		}
	}

	out = mustRun(t, endpoint, "get", "machine", m1, "-o", "yaml")
	assert.Contains(t, out, "clusterTalosVersion: v1.9.0")
	assert.Contains(t, out, "nodeUniqueToken: <redacted>")
	assert.NotContains(t, out, "secret-token")

	// The generic get hides the tokens too, even with --show-config.
	status := resources.NewOmniMachineStatus(m1)
	status.TypedSpec().WipedNodeUniqueToken = `{"Fingerprint":"f","Token":"voided-token"}`
	require.NoError(t, st.Create(t.Context(), status))

	for _, args := range [][]string{
		{"get", "omnimachines", "-o", "yaml"},
		{"get", "omnimachines", m1, "-o", "json", "--show-config"},
		{"get", "omnimachinestatuses", "-o", "yaml", "--show-config"},
	} {
		out = mustRun(t, endpoint, args...)
		assert.Contains(t, out, "redacted", args)
		assert.NotContains(t, out, "secret-token", args)
		assert.NotContains(t, out, "voided-token", args)
	}
}
