package agentapi

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/provider/internal/machineview"
)

func TestMachineChangesFollowerLife(t *testing.T) {
	t.Parallel()

	c := newMachineChanges(machineview.New())

	a := c.subscribe("a")
	b := c.subscribe("a")
	other := c.subscribe("b")

	c.mu.Lock()
	require.Equal(t, 3, c.n)
	require.NotNil(t, c.stop)
	require.Len(t, c.subs["a"], 2)
	c.mu.Unlock()

	a.close()
	a.close() // twice is harmless
	b.close()
	other.close()

	c.mu.Lock()
	defer c.mu.Unlock()

	require.Zero(t, c.n)
	require.Nil(t, c.stop, "the follower stops with the last subscription")
	require.Empty(t, c.subs)
}

func TestMachineChangesNoWakeWithoutChange(t *testing.T) {
	t.Parallel()

	c := newMachineChanges(machineview.New())
	s := c.subscribe("a")

	t.Cleanup(s.close)

	select {
	case <-s.changed():
		t.Fatal("woken without a change")
	case <-time.After(3 * coalesce):
	}
}
