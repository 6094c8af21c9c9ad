//go:build lab

package labnet

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/internal/netns"
)

// TestLabNetUpDown builds the lab network twice over (Up is idempotent), with a tap,
// checks what each namespace holds and that the site reaches the bridge, and takes it
// down, leaving nothing, pass or fail.
func TestLabNetUpDown(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the lab network needs root")
	}

	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs ip (iproute2)")
	}

	n := New(fmt.Sprintf("anvln%d", os.Getpid()%100000))

	t.Cleanup(func() {
		assert.NoError(t, n.Down())

		for _, ns := range n.Namespaces() {
			assert.False(t, netns.Exists(ns), "namespace %s is left", ns)
		}
	})

	for range 2 {
		require.NoError(t, n.Up())
		require.NoError(t, n.AddTap("tap0"))
	}

	links := func(ns string) []string {
		l, err := netns.OpenLinks(ns)
		require.NoError(t, err)

		defer l.Close()

		names, err := l.Names()
		require.NoError(t, err)

		return names
	}

	assert.ElementsMatch(t, []string{"lo", Bridge, bridgeVeth, "tap0"}, links(n.ProviderNS))
	assert.ElementsMatch(t, []string{"lo", SiteVeth}, links(n.SiteNS))

	p, err := netns.OpenLinks(n.ProviderNS)
	require.NoError(t, err)

	addrs, err := p.Addrs(Bridge)
	require.NoError(t, err)
	require.NoError(t, p.Close())
	assert.Contains(t, addrs, netip.MustParsePrefix("10.77.0.1/24"))
	assert.Contains(t, addrs, netip.MustParsePrefix("fd77::1/64"))

	out, err := exec.Command("ip", "-n", n.ProviderNS, "-d", "link", "show", "tap0").CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "master "+Bridge)
	assert.Contains(t, string(out), "tap")

	// The site reaches the provider's address across the veth and the bridge.
	var l net.Listener

	require.NoError(t, netns.Do(n.ProviderNS, func() error {
		var err error
		l, err = net.Listen("tcp", net.JoinHostPort(ProviderAddr, "0"))

		return err
	}))

	t.Cleanup(func() { l.Close() })

	accepted := make(chan error, 1)

	go func() {
		c, err := l.Accept()
		if err == nil {
			err = c.Close()
		}

		accepted <- err
	}()

	require.NoError(t, netns.Do(n.SiteNS, func() error {
		c, err := net.DialTimeout("tcp", l.Addr().String(), 10*time.Second)
		if err != nil {
			return err
		}

		return c.Close()
	}))
	require.NoError(t, <-accepted)

	require.NoError(t, n.Down())
	require.NoError(t, n.Down(), "down again is harmless")
}
