package pxe

import (
	"net"
	"net/netip"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/iana"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/anvil-metal/anvil/provider/internal/untrusted"
)

// A boot client Anvil cannot serve is logged once per machine and reason, with the
// reason; traffic that is not for us is not logged above debug level.
func TestUnservedClientsLoggedOnce(t *testing.T) {
	t.Parallel()

	core, logs := observer.New(zapcore.InfoLevel)
	p := testProxy(*testConfig(t, false), NewMetrics(nil).dhcp("proxy"), NewMetrics(nil).dhcp("bootserver"))
	p.unserved = newUnservedLog(zap.New(core))
	src := netip.MustParseAddrPort("0.0.0.0:68")

	send := func(req *dhcpv4.DHCPv4) {
		out, _ := p.handle(req.ToBytes(), src, false)
		assert.Nil(t, out)
	}

	otherMAC := net.HardwareAddr{0x52, 0x54, 0, 9, 9, 9}

	for range 3 {
		send(pxeRequest(t, dhcpv4.MessageTypeDiscover, 11)) // arm64, no arm64 boot file
		send(httpBootRequest(t, dhcpv4.MessageTypeDiscover, iana.EFI_X86_64_HTTP))
		send(pxeRequest(t, dhcpv4.MessageTypeDiscover, 11, dhcpv4.WithHwAddr(otherMAC)))

		nonPXE, err := dhcpv4.NewDiscovery(testMAC, dhcpv4.WithOption(dhcpv4.OptClassIdentifier("MSFT 5.0")))
		require.NoError(t, err)
		send(nonPXE)
	}

	entries := logs.All()
	require.Len(t, entries, 3, "one line per machine and reason")

	for _, e := range entries {
		assert.Equal(t, zapcore.WarnLevel, e.Level)
		assert.Equal(t, "boot client not served", e.Message)
	}

	fields := entries[0].ContextMap()
	assert.Equal(t, testMAC.String(), fields["mac"])
	assert.Equal(t, errNoARM64.unserved, fields["reason"])
	assert.EqualValues(t, iana.EFI_ARM64, fields["client_arch"])
	assert.Equal(t, "PXEClient:Arch:00000:UNDI:002001", fields["vendor_class"])

	assert.Equal(t, errHTTPBoot.unserved, entries[1].ContextMap()["reason"])
	assert.Equal(t, otherMAC.String(), entries[2].ContextMap()["mac"])
}

// The set of machines remembered is bounded: a flood of made-up MAC addresses costs at
// most maxUnservedRemembered entries.
func TestUnservedLogBounded(t *testing.T) {
	t.Parallel()

	u := newUnservedLog(zap.NewNop())

	for i := range maxUnservedRemembered + 10 {
		mac := net.HardwareAddr{2, 0, 0, byte(i >> 16), byte(i >> 8), byte(i)}
		assert.True(t, u.note(mac, ClientArch{Code: iana.EFI_ARM64}, nil, errNoARM64))
	}

	assert.LessOrEqual(t, len(u.seen), maxUnservedRemembered)
	assert.False(t, u.note(net.HardwareAddr{2, 0, 0, 0, 16, 9}, ClientArch{}, nil, errNoARM64), "remembered since the reset")
	assert.False(t, u.note(testMAC, ClientArch{}, nil, errNotPXE), "not a boot client")
}

func TestPrintable(t *testing.T) {
	t.Parallel()

	assert.Equal(t, "PXE?Client??", string(printable([]byte("PXE\x00Client\xff\n"))))
	assert.Len(t, printable(make([]byte, 300)), 64)
}

// TestUnservedClientIDBounded: a DHCPv6 client names itself by a DUID as long as its
// datagram; the unserved log keeps and prints a bounded part of it.
func TestUnservedClientIDBounded(t *testing.T) {
	t.Parallel()

	core, logs := observer.New(zap.InfoLevel)
	s := testDHCPv6(testConfig6(t, false, false), zap.New(core))
	src := netip.MustParseAddrPort("[fe80::5054:ff:fe12:3456%vs0]:546")

	const clients = 50

	for i := range clients {
		addr := make(net.HardwareAddr, 60000)
		addr[0] = byte(i)

		req := request6(t, dhcpv6.MessageTypeSolicit, kindARM64, dhcpv6.WithClientID(&dhcpv6.DUIDLL{HWType: iana.HWTypeEthernet, LinkLayerAddr: addr}))
		out, _ := s.handle(req.ToBytes(), src, false)
		assert.Nil(t, out)
	}

	warned := logs.FilterMessage("boot client not served").All()
	require.Len(t, warned, clients, "each client is told of once")

	for _, e := range warned {
		mac, _ := e.ContextMap()["mac"].(string)
		assert.LessOrEqual(t, len(mac), 3*untrusted.MaxHardwareAddr+len("…(60000 bytes)"), "%.100s", mac)
		assert.Contains(t, mac, "…(60000 bytes)")
	}

	s.unserved.mu.Lock()
	defer s.unserved.mu.Unlock()

	for k := range s.unserved.seen {
		assert.LessOrEqual(t, len(k.mac), maxClientID, "what is remembered of a client is bounded")
	}
}
