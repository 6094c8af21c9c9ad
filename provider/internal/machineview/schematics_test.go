package machineview_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/provider/internal/resources"
)

func TestServes(t *testing.T) {
	t.Parallel()

	st := openState(t)
	v := startView(t, st)
	s1, s2 := strings.Repeat("1", 64), strings.Repeat("2", 64)

	in := resources.NewMachineIntent("m1")
	in.TypedSpec().Acceptance = resources.AcceptanceAccepted
	in.TypedSpec().Allocation = &resources.Allocation{ID: "a1", TalosVersion: "v1.9.0", SchematicID: s1}
	require.NoError(t, st.Create(t.Context(), in))

	require.Eventually(t, func() bool { return v.Serves(s1, "v1.9.0") }, 5*time.Second, time.Millisecond)
	assert.False(t, v.Serves(s1, "v1.9.1"), "another version")
	assert.False(t, v.Serves(s2, "v1.9.0"), "another schematic")

	// Deallocated: no longer served.
	in.TypedSpec().Allocation = nil
	require.NoError(t, st.Update(t.Context(), in))
	require.Eventually(t, func() bool { return !v.Serves(s1, "v1.9.0") }, 5*time.Second, time.Millisecond)
}
