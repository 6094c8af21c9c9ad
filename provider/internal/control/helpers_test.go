package control_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/provider/internal/resources"
)

const machineID = "4c4c4544-0000-1000-8000-000000000001"

// openState is a store of its own with one known machine.
func openState(t *testing.T) *resources.Store {
	t.Helper()

	st, err := resources.Open(t.Context(), t.TempDir())
	require.NoError(t, err)

	t.Cleanup(func() { require.NoError(t, st.Close()) })

	m := resources.NewMachine(machineID)
	m.TypedSpec().UUID = machineID
	require.NoError(t, st.Create(t.Context(), m))

	return st
}
