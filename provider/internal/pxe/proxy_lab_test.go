//go:build lab

package pxe

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
)

func TestLabProxyDHCP(t *testing.T) {
	t.Parallel()

	n := newTestNet(t)

	runServer(t, n.server, func(ctx context.Context) error {
		p, err := NewProxyDHCP(Config{
			Interface:     testServerIf,
			ScriptURL:     testScriptURL,
			ARM64BootFile: "ipxe-arm64.efi",
		}, zaptest.NewLogger(t), NewMetrics(nil))
		if err != nil {
			return err
		}

		return p.Run(ctx)
	})

	client := newTestClient(t, n, 68)
	bcast := netip.MustParseAddrPort("255.255.255.255:67")

	// The first exchange retries while the server binds.
	_, _, err := client.exchange(pxeRequest(t, dhcpv4.MessageTypeDiscover, 0), bcast, 50, 200*time.Millisecond)
	require.NoError(t, err)

	for _, tc := range []struct {
		name     string
		req      *dhcpv4.DHCPv4
		dst      netip.AddrPort
		wantType dhcpv4.MessageType
		wantFile string
		wantFrom string
	}{
		{"BIOS discover", pxeRequest(t, dhcpv4.MessageTypeDiscover, 0), bcast, dhcpv4.MessageTypeOffer, "undionly.kpxe", "10.199.0.1:67"},
		{"UEFI x86-64 discover", pxeRequest(t, dhcpv4.MessageTypeDiscover, 7), bcast, dhcpv4.MessageTypeOffer, DefaultUEFIBootFile, "10.199.0.1:67"},
		{"arm64 discover", pxeRequest(t, dhcpv4.MessageTypeDiscover, 11), bcast, dhcpv4.MessageTypeOffer, "ipxe-arm64.efi", "10.199.0.1:67"},
		{"iPXE discover", pxeRequest(t, dhcpv4.MessageTypeDiscover, 9, withIPXE), bcast, dhcpv4.MessageTypeOffer, testScriptURL, "10.199.0.1:67"},
		{"UEFI request to us", pxeRequest(t, dhcpv4.MessageTypeRequest, 9, withUsAsID, withGUID), bcast, dhcpv4.MessageTypeAck, DefaultUEFIBootFile, "10.199.0.1:67"},
		{
			"port 4011 request",
			pxeRequest(t, dhcpv4.MessageTypeRequest, 7, dhcpv4.WithClientIP(net.IP(testClientIP.AsSlice())), dhcpv4.WithBroadcast(false)),
			netip.AddrPortFrom(testServerIP, 4011), dhcpv4.MessageTypeAck, DefaultUEFIBootFile, "10.199.0.1:4011",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, from, err := client.exchange(tc.req, tc.dst, 3, time.Second)
			require.NoError(t, err)

			assert.Equal(t, tc.wantType, resp.MessageType())
			assert.Equal(t, tc.wantFile, resp.BootFileName)
			assert.Equal(t, tc.wantFile, resp.BootFileNameOption())
			assert.True(t, resp.YourIPAddr.IsUnspecified())
			assert.True(t, resp.ServerIPAddr.Equal(net.IP(testServerIP.AsSlice())))
			assert.Equal(t, tc.wantFrom, from.String())
		})
	}

	t.Run("non-PXE discover gets nothing", func(t *testing.T) {
		req, err := dhcpv4.NewDiscovery(testMAC)
		require.NoError(t, err)

		_, _, err = client.exchange(req, bcast, 1, 500*time.Millisecond)
		require.ErrorIs(t, err, errNoReply)
	})

	t.Run("relayed discover is answered to the relay", func(t *testing.T) {
		relay := newTestClient(t, n, 67)
		req := pxeRequest(t, dhcpv4.MessageTypeDiscover, 9, dhcpv4.WithGatewayIP(net.IP(testClientIP.AsSlice())))

		resp, from, err := relay.exchange(req, netip.AddrPortFrom(testServerIP, 67), 3, time.Second)
		require.NoError(t, err)
		assert.Equal(t, DefaultUEFIBootFile, resp.BootFileName)
		assert.Equal(t, "10.199.0.1:67", from.String())
	})
}
