package agentapi_test

import (
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	agentv1 "github.com/anvil-metal/anvil/api/agent/v1"
	"github.com/anvil-metal/anvil/internal/token"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// TestRegistrationObserved: an agent's valid hello tells the machine controller the
// machine registered (so that it is never forgotten, nor refused past the bound on
// pending machines), once; a MAC it claims is recorded only if it is one.
func TestRegistrationObserved(t *testing.T) {
	t.Parallel()

	f := newFixture(t)

	// Known from a boot script alone.
	require.NoError(t, f.store.Create(t.Context(), resources.NewMachine(machineID)))
	require.Eventually(t, func() bool { return f.view.Get(machineID) != nil }, 5*time.Second, time.Millisecond)

	stream, err := f.client.Session(t.Context())
	require.NoError(t, err)
	require.NoError(t, stream.Send(&agentv1.AgentMessage{Message: &agentv1.AgentMessage_Hello{Hello: &agentv1.Hello{
		MachineId: machineID, Token: token.Sign(f.key, token.Claims{Kind: token.KindAgent, MachineID: machineID, Issued: time.Now()}),
		Macs: []string{"not a MAC, as long as the agent likes"},
	}}}))

	msg, err := stream.Recv()
	require.NoError(t, err)
	require.NotNil(t, msg.GetWelcome())

	select {
	case obs := <-f.obs:
		assert.True(t, obs.Registered)
		assert.Equal(t, machineID, obs.MachineID)
		assert.Empty(t, obs.MAC, "not a MAC: not recorded")
	case <-time.After(5 * time.Second):
		t.Fatal("the registration was not observed")
	}

	// Recorded registered: the next session tells nothing.
	_, err = safe.StateUpdateWithConflicts(t.Context(), f.store, resources.NewMachine(machineID).Metadata(), func(m *resources.Machine) error {
		m.TypedSpec().AgentRegistered = time.Now()

		return nil
	})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		e := f.view.Get(machineID)

		return e != nil && e.Machine != nil && !e.Machine.AgentRegistered.IsZero()
	}, 5*time.Second, time.Millisecond)

	_, err = f.hello(t, token.Sign(f.key, token.Claims{Kind: token.KindAgent, MachineID: machineID, Issued: time.Now()}))
	require.NoError(t, err)

	select {
	case obs := <-f.obs:
		t.Fatalf("observed again: %+v", obs)
	case <-time.After(200 * time.Millisecond):
	}
}
