package state_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v4"

	"github.com/anvil-metal/anvil/provider/internal/state"
)

// Every spec must marshal to YAML: anvilctl and COSI clients print resources that way.
func TestSpecsMarshalYAML(t *testing.T) {
	t.Parallel()

	m := state.NewMachine("m")
	m.TypedSpec().AgentBootIssued = time.Now()

	for _, spec := range []any{
		m.TypedSpec(),
		state.NewMachineIntent("m").TypedSpec(),
		state.NewMachineStatus("m").TypedSpec(),
		state.NewDHCPLease("m").TypedSpec(),
		state.NewSchematic("s").TypedSpec(),
		state.NewMachineInventory("m").TypedSpec(),
	} {
		out, err := yaml.Marshal(spec)
		require.NoError(t, err)
		require.NotEmpty(t, out)
	}

	out, err := yaml.Marshal(state.NewMachineStatus("m").TypedSpec())
	require.NoError(t, err)
	require.NotContains(t, string(out), "installedAt", "a zero time is omitted")
}
