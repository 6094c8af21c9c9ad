//go:build lab

package dhcpbench

import (
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/internal/netns"
	"github.com/anvil-metal/anvil/internal/proc"
)

// TestLabPair builds the benchmark's two namespaces, reaches one from the other with a
// command run in it, reads their UDP counters and removes them.
func TestLabPair(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}

	p, err := newPair(fmt.Sprintf("anvbt%d", os.Getpid()%100000), "10.98.0")
	require.NoError(t, err)

	t.Cleanup(func() {
		assert.NoError(t, p.delete())
		assert.False(t, netns.Exists(p.server))
		assert.False(t, netns.Exists(p.client))
	})

	out, err := proc.Run(t.Context(), netns.Argv(p.client, "ip", "-o", "addr", "show", "dev", p.clientIf)...)
	require.NoError(t, err)
	assert.Contains(t, out, "inet 10.98.0.2/24")

	out, err = proc.Run(t.Context(), netns.Argv(p.server, "ip", "-o", "link", "show", "dev", p.serverIf)...)
	require.NoError(t, err)
	assert.Contains(t, out, "state UP")

	for _, ns := range []string{p.server, p.client} {
		v, err := udpRcvbufErrors(ns)
		require.NoError(t, err)
		assert.Zero(t, v, "a new namespace has dropped nothing")
	}

	// Creating it again keeps what exists, as after a run that did not get to delete it.
	_, err = newPair(fmt.Sprintf("anvbt%d", os.Getpid()%100000), "10.98.0")
	assert.NoError(t, err, "creation keeps what exists")
}
