package transitions_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/provider/internal/resources"
	"github.com/anvil-metal/anvil/provider/internal/transitions"
)

// TestHold: a machine held after a security event is not allocated, keeps the first
// reason it was held for, stays held through Omni's resync (a hold is the provider's, not
// Omni's cordon, and Omni users cannot lift it), is held even when Omni manages the
// provider, and only an uncordon on the provider lifts it.
func TestHold(t *testing.T) {
	t.Parallel()

	ctx := t.Context()
	st := openState(t)
	tr := transitions.New(st, transitions.Options{})

	require.NoError(t, apply(ctx, tr, "accept"))
	require.NoError(t, tr.Hold(ctx, machineID, "security event config-replay: first"))
	require.NoError(t, tr.Hold(ctx, machineID, "security event config-replay: second"))
	assert.Equal(t, "security event config-replay: first", intentSpec(t, st).Held, "the first reason stands")

	err := apply(ctx, tr, "allocate")
	assert.Equal(t, transitions.CodeRefused, codeOf(err))
	assert.ErrorContains(t, err, "held after a security event")

	// Omni's resync of the same machine, cordon off, does not lift the hold.
	managed := transitions.New(st, transitions.Options{ManagedBy: "Omni at https://omni.test"})
	_, err = managed.Owner().ApplyOmni(ctx, machineID, resources.OmniMachineSpec{Acceptance: resources.AcceptanceAccepted})
	require.NoError(t, err)
	assert.NotEmpty(t, intentSpec(t, st).Held, "Omni's sync keeps the hold")

	// The provider holds a machine Omni manages: its own safety, not Omni's decision.
	require.NoError(t, managed.Hold(ctx, machineID, "again"))

	require.NoError(t, apply(ctx, tr, "uncordon"))
	assert.Empty(t, intentSpec(t, st).Held)
	require.NoError(t, apply(ctx, tr, "allocate"))
}
