package resources_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v4"

	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// Every spec must marshal to YAML: anvilctl and COSI clients print resources that way.
func TestSpecsMarshalYAML(t *testing.T) {
	t.Parallel()

	m := resources.NewMachine("m")
	m.TypedSpec().AgentBootIssued = time.Now()

	for _, spec := range []any{
		m.TypedSpec(),
		resources.NewMachineIntent("m").TypedSpec(),
		resources.NewMachineStatus("m").TypedSpec(),
		resources.NewDHCPLease("m").TypedSpec(),
		resources.NewSchematic("s").TypedSpec(),
		resources.NewMachineInventory("m").TypedSpec(),
	} {
		out, err := yaml.Marshal(spec)
		require.NoError(t, err)
		require.NotEmpty(t, out)
	}

	out, err := yaml.Marshal(resources.NewMachineStatus("m").TypedSpec())
	require.NoError(t, err)
	require.NotContains(t, string(out), "installedAt", "a zero time is omitted")
}
