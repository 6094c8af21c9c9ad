//go:build lab

package pxe

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/anvil-metal/anvil/provider/internal/resources"
	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
)

// runDHCPServer opens the state in dir, runs a full DHCP server on it in the server
// namespace, and returns a stop function that waits for both to close.
func runDHCPServer(t *testing.T, n *testNet, dir string) (stop func(), leases *StateLeases) {
	t.Helper()

	st, err := resources.Open(t.Context(), dir)
	require.NoError(t, err)

	leases = NewStateLeases(st)
	ctx, cancel := context.WithCancel(t.Context())

	done := inNetns(n.server, func() error {
		s, err := NewDHCPServer(testPoolConfig(), leases, zaptest.NewLogger(t), NewMetrics(nil))
		if err != nil {
			return err
		}

		return s.Run(ctx)
	})

	stopped := false
	stop = func() {
		if stopped {
			return
		}

		stopped = true

		cancel()
		assert.NoError(t, <-done)
		assert.NoError(t, st.Close())
	}
	t.Cleanup(stop)

	return stop, leases
}

func TestLabDHCPServer(t *testing.T) {
	t.Parallel()

	n := newTestNet(t)
	dir := t.TempDir()
	stop, leases := runDHCPServer(t, n, dir)

	client := newTestClient(t, n, 68)
	bcast := netip.MustParseAddrPort("255.255.255.255:67")

	discover := pxeRequest(t, dhcpv4.MessageTypeDiscover, 9)

	offer, _, err := client.exchange(discover, bcast, 50, 200*time.Millisecond)
	require.NoError(t, err)
	require.Equal(t, dhcpv4.MessageTypeOffer, offer.MessageType())

	addr, ok := addr4(offer.YourIPAddr)
	require.True(t, ok)
	assert.Equal(t, "10.199.0.100", addr.String())
	assert.Equal(t, DefaultUEFIBootFile, offer.BootFileName)
	assert.Equal(t, "PXEClient", offer.ClassIdentifier())
	assert.Equal(t, net.CIDRMask(24, 32), offer.SubnetMask())
	assert.Equal(t, 10*time.Minute, offer.IPAddressLeaseTime(0))

	request := pxeRequest(t, dhcpv4.MessageTypeRequest, 9,
		dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(offer.YourIPAddr)),
		dhcpv4.WithOption(dhcpv4.OptServerIdentifier(offer.ServerIdentifier())),
		dhcpv4.WithOption(dhcpv4.OptHostName("node-1")))

	ack, _, err := client.exchange(request, bcast, 3, time.Second)
	require.NoError(t, err)
	require.Equal(t, dhcpv4.MessageTypeAck, ack.MessageType())
	assert.True(t, ack.YourIPAddr.Equal(offer.YourIPAddr))
	assert.Equal(t, DefaultUEFIBootFile, ack.BootFileNameOption())

	// Durable before the ACK: the lease is in the state now.
	l, found, err := leases.Lookup(t.Context(), testMAC.String())
	require.NoError(t, err)
	require.True(t, found)
	assert.Equal(t, addr, l.Address)
	assert.Equal(t, "node-1", l.Hostname)

	// A non-PXE client gets an address and no boot options.
	other, err := dhcpv4.NewDiscovery(net.HardwareAddr{2, 0, 0, 0, 0, 1})
	require.NoError(t, err)

	otherOffer, _, err := client.exchange(other, bcast, 3, time.Second)
	require.NoError(t, err)
	assert.Equal(t, "10.199.0.101", otherOffer.YourIPAddr.String())
	assert.Empty(t, otherOffer.BootFileName)
	assert.Empty(t, otherOffer.BootFileNameOption())
	assert.Empty(t, otherOffer.ClassIdentifier())

	// Someone else's address is refused.
	steal := pxeRequest(t, dhcpv4.MessageTypeRequest, 0,
		dhcpv4.WithHwAddr(net.HardwareAddr{2, 0, 0, 0, 0, 2}),
		dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(offer.YourIPAddr)))

	nak, _, err := client.exchange(steal, bcast, 3, time.Second)
	require.NoError(t, err)
	assert.Equal(t, dhcpv4.MessageTypeNak, nak.MessageType())

	// Restart on the same state: the client gets the same address back.
	stop()

	_, leases = runDHCPServer(t, n, dir)

	l, found, err = leases.Lookup(t.Context(), testMAC.String())
	require.NoError(t, err)
	require.True(t, found)
	assert.Equal(t, addr, l.Address)

	again, _, err := client.exchange(pxeRequest(t, dhcpv4.MessageTypeDiscover, 9), bcast, 50, 200*time.Millisecond)
	require.NoError(t, err)
	assert.True(t, again.YourIPAddr.Equal(offer.YourIPAddr))

	// RELEASE frees it.
	release := pxeRequest(t, dhcpv4.MessageTypeRelease, 9, dhcpv4.WithClientIP(offer.YourIPAddr))
	_, _, err = client.exchange(release, netip.AddrPortFrom(testServerIP, 67), 1, 300*time.Millisecond)
	require.ErrorIs(t, err, errNoReply)

	// A RELEASE gets no reply, so wait for the server's delete to land (a bbolt
	// commit, which can be slow under disk load) rather than a fixed delay.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, found, err := leases.Lookup(t.Context(), testMAC.String())
		require.NoError(c, err)
		assert.False(c, found, "lease still present after RELEASE")
	}, 10*time.Second, 50*time.Millisecond)
}
