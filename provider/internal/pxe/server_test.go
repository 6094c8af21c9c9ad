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
)

func testPoolConfig() Config {
	return Config{
		Interface: testServerIf,
		ScriptURL: testScriptURL,
		Pool: &Pool{
			Start:     netip.MustParseAddr("10.199.0.100"),
			End:       netip.MustParseAddr("10.199.0.110"),
			Subnet:    netip.MustParsePrefix("10.199.0.0/24"),
			Router:    testServerIP,
			DNS:       []netip.Addr{testServerIP},
			LeaseTime: 10 * time.Minute,
		},
	}
}

// memLeases is a LeaseStore in memory, for decision tests without sockets.
type memLeases map[string]Lease

func (m memLeases) Lookup(_ context.Context, mac string) (Lease, bool, error) {
	l, ok := m[mac]

	return l, ok, nil
}

func (m memLeases) List(context.Context) ([]Lease, error) {
	out := make([]Lease, 0, len(m))
	for _, l := range m {
		out = append(out, l)
	}

	return out, nil
}

func (m memLeases) Put(_ context.Context, l Lease) error {
	m[l.MAC] = l

	return nil
}

func (m memLeases) Delete(_ context.Context, mac string) error {
	delete(m, mac)

	return nil
}

func TestDHCPServerPoolExhaustionAndDecline(t *testing.T) {
	t.Parallel()

	cfg := testPoolConfig()
	cfg.Pool.End = netip.MustParseAddr("10.199.0.101")
	cfg.ServerIP = testServerIP
	require.NoError(t, cfg.Validate())

	store := memLeases{}
	s := &DHCPServer{
		cfg: cfg, leases: store, logger: zapNop(), unserved: newUnservedLog(zapNop()), c: NewMetrics(nil).dhcp("dhcp"), now: time.Now,
		byMAC: map[string]Lease{}, byAddr: map[netip.Addr]string{}, offers: map[string]offer{}, declined: map[netip.Addr]time.Time{},
	}

	var got []string

	for i := range 3 {
		req, err := dhcpv4.NewDiscovery(net.HardwareAddr{2, 0, 0, 0, 0, byte(i)})
		require.NoError(t, err)

		resp, err := s.Handle(t.Context(), req)
		if i == 2 {
			require.ErrorIs(t, err, errNoAddress)

			continue
		}

		require.NoError(t, err)
		got = append(got, resp.YourIPAddr.String())
	}

	assert.Equal(t, []string{"10.199.0.100", "10.199.0.101"}, got)

	// The first client declines its address: it is kept out of use.
	decline, err := dhcpv4.New(dhcpv4.WithMessageType(dhcpv4.MessageTypeDecline), dhcpv4.WithHwAddr(net.HardwareAddr{2, 0, 0, 0, 0, 0}),
		dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.IPv4(10, 199, 0, 100))))
	require.NoError(t, err)

	_, err = s.Handle(t.Context(), decline)
	require.ErrorIs(t, err, ErrIgnore)

	req, err := dhcpv4.NewDiscovery(net.HardwareAddr{2, 0, 0, 0, 0, 9})
	require.NoError(t, err)

	_, err = s.Handle(t.Context(), req)
	require.ErrorIs(t, err, errNoAddress)
}
