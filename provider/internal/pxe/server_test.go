package pxe

import (
	"context"
	"errors"
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
	s := newDHCPServer(cfg, store, zapNop(), NewMetrics(nil).dhcp("dhcp"))

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

// madeUp is the MAC address of the i-th client of a flood.
func madeUp(i int) net.HardwareAddr {
	return net.HardwareAddr{0x02, 0xfa, byte(i >> 16), byte(i >> 8), byte(i), 0x01}
}

func dhcpPacket(t *testing.T, mt dhcpv4.MessageType, mac net.HardwareAddr, addr netip.Addr) *dhcpv4.DHCPv4 {
	t.Helper()

	mods := []dhcpv4.Modifier{dhcpv4.WithMessageType(mt), dhcpv4.WithHwAddr(mac)}
	if addr.IsValid() {
		mods = append(mods, dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(addr.AsSlice())))
	}

	pkt, err := dhcpv4.New(mods...)
	require.NoError(t, err)

	return pkt
}

// testDHCPServer is a full DHCP server of cfg without sockets, on a clock the test moves.
func testDHCPServer(t *testing.T, cfg Config) (*DHCPServer, *time.Time) {
	t.Helper()

	cfg.ServerIP = testServerIP
	require.NoError(t, cfg.Validate())

	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	s := newDHCPServer(cfg, memLeases{}, zapNop(), NewMetrics(nil).dhcp("dhcp"))
	s.now = func() time.Time { return now }

	return s, &now
}

// leaseFor runs a client through DISCOVER and REQUEST and returns its address.
func leaseFor(t *testing.T, s *DHCPServer, mac net.HardwareAddr) netip.Addr {
	t.Helper()

	offer, err := s.Handle(t.Context(), dhcpPacket(t, dhcpv4.MessageTypeDiscover, mac, netip.Addr{}))
	require.NoError(t, err, "no offer")

	addr, ok := addr4(offer.YourIPAddr)
	require.True(t, ok)

	ack, err := s.Handle(t.Context(), dhcpPacket(t, dhcpv4.MessageTypeRequest, mac, addr))
	require.NoError(t, err)
	require.Equal(t, dhcpv4.MessageTypeAck, ack.MessageType())

	return addr
}

// TestDHCPServerDeclineFlood: spoofed DECLINEs do not starve the pool. Anyone may send a
// DECLINE for any address from any MAC address: only the client an address was offered
// or leased to may decline it, and declines are bounded by client and by pool.
func TestDHCPServerDeclineFlood(t *testing.T) {
	t.Parallel()

	pool := testPoolConfig().Pool

	for _, tc := range []struct {
		name  string
		flood func(t *testing.T, s *DHCPServer)
	}{
		{
			name: "made-up clients decline every address",
			flood: func(t *testing.T, s *DHCPServer) {
				for i := range 3000 {
					for a := pool.Start; !pool.End.Less(a); a = a.Next() {
						_, err := s.Handle(t.Context(), dhcpPacket(t, dhcpv4.MessageTypeDecline, madeUp(i), a))
						require.ErrorIs(t, err, errDeclineNotOurs)
					}
				}
			},
		},
		{
			name: "made-up clients decline what they are offered",
			flood: func(t *testing.T, s *DHCPServer) {
				for i := range 3000 {
					offer, err := s.Handle(t.Context(), dhcpPacket(t, dhcpv4.MessageTypeDiscover, madeUp(i), netip.Addr{}))
					if errors.Is(err, errNoAddress) {
						continue
					}

					require.NoError(t, err)

					addr, _ := addr4(offer.YourIPAddr)
					_, err = s.Handle(t.Context(), dhcpPacket(t, dhcpv4.MessageTypeDecline, madeUp(i), addr))
					require.ErrorIs(t, err, ErrIgnore)
				}
			},
		},
		{
			name: "made-up clients decline what they are leased",
			flood: func(t *testing.T, s *DHCPServer) {
				for i := range 3000 {
					addr := leaseFor(t, s, madeUp(i))
					_, err := s.Handle(t.Context(), dhcpPacket(t, dhcpv4.MessageTypeDecline, madeUp(i), addr))
					require.ErrorIs(t, err, ErrIgnore)
				}
			},
		},
		{
			name: "one client declines what it is offered, again and again",
			flood: func(t *testing.T, s *DHCPServer) {
				for range 3000 {
					offer, err := s.Handle(t.Context(), dhcpPacket(t, dhcpv4.MessageTypeDiscover, madeUp(1), netip.Addr{}))
					require.NoError(t, err)

					addr, _ := addr4(offer.YourIPAddr)
					_, err = s.Handle(t.Context(), dhcpPacket(t, dhcpv4.MessageTypeDecline, madeUp(1), addr))
					require.ErrorIs(t, err, ErrIgnore)
				}

				assert.LessOrEqual(t, s.declinedBy(madeUp(1).String()), maxDeclinesPerClient)
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			s, _ := testDHCPServer(t, testPoolConfig())

			tc.flood(t, s)

			// At most a quarter of the pool is held out, and a real client gets an
			// address.
			assert.LessOrEqual(t, len(s.declined), max(pool.size()/declinedShare, 1))
			assert.True(t, s.inPool(leaseFor(t, s, net.HardwareAddr{0x52, 0x54, 0, 0, 0, 0x42})))
		})
	}
}

// TestDHCPServerDecline: a client's DECLINE of its own address holds the address out of
// use for declineDelay, then it is offered again.
func TestDHCPServerDecline(t *testing.T) {
	t.Parallel()

	cfg := testPoolConfig()
	cfg.Pool.End = cfg.Pool.Start
	s, now := testDHCPServer(t, cfg)

	client := net.HardwareAddr{0x52, 0x54, 0, 0, 0, 0x42}
	addr := leaseFor(t, s, client)

	// Another client's word is not taken for it.
	_, err := s.Handle(t.Context(), dhcpPacket(t, dhcpv4.MessageTypeDecline, madeUp(1), addr))
	require.ErrorIs(t, err, errDeclineNotOurs)
	assert.Empty(t, s.declined)

	_, err = s.Handle(t.Context(), dhcpPacket(t, dhcpv4.MessageTypeDecline, client, addr))
	require.ErrorIs(t, err, errMessageType, "taken, and not answered")
	assert.Contains(t, s.declined, addr)
	assert.NotContains(t, s.byMAC, client.String(), "the lease is gone")

	_, err = s.Handle(t.Context(), dhcpPacket(t, dhcpv4.MessageTypeDiscover, client, netip.Addr{}))
	require.ErrorIs(t, err, errNoAddress)

	*now = now.Add(declineDelay)
	assert.Equal(t, addr, leaseFor(t, s, client))
	assert.Empty(t, s.declined, "expired declines are removed")
}

// TestDHCPServerOfferBounds: a flood of DISCOVERs from made-up MAC addresses leaves the
// server's maps bounded: expired offers are removed, and past maxOffers a client without
// an offer is not answered until offers expire.
func TestDHCPServerOfferBounds(t *testing.T) {
	t.Parallel()

	t.Run("expired offers are removed", func(t *testing.T) {
		t.Parallel()

		s, now := testDHCPServer(t, testPoolConfig())
		size := s.cfg.Pool.size()

		for round := range 100 {
			for i := range 2 * size {
				_, err := s.Handle(t.Context(), dhcpPacket(t, dhcpv4.MessageTypeDiscover, madeUp(round*1000+i), netip.Addr{}))
				if err != nil {
					require.ErrorIs(t, err, errNoAddress)
				}
			}

			require.LessOrEqual(t, len(s.offers), size, "round %d", round)
			require.LessOrEqual(t, len(s.offeredTo), size, "round %d", round)

			*now = now.Add(offerHold)
		}

		assert.LessOrEqual(t, len(s.offers), maxOffers)
		assert.True(t, s.inPool(leaseFor(t, s, net.HardwareAddr{0x52, 0x54, 0, 0, 0, 0x42})))
	})

	t.Run("offers are capped", func(t *testing.T) {
		t.Parallel()

		cfg := testPoolConfig()
		cfg.Pool.Subnet = netip.MustParsePrefix("10.199.0.0/16")
		cfg.Pool.End = netip.MustParseAddr("10.199.3.255")
		s, now := testDHCPServer(t, cfg)
		s.maxOffers = 64

		client := net.HardwareAddr{0x52, 0x54, 0, 0, 0, 0x42}
		_, err := s.Handle(t.Context(), dhcpPacket(t, dhcpv4.MessageTypeDiscover, client, netip.Addr{}))
		require.NoError(t, err)

		refused := 0

		for i := range 2000 {
			_, err := s.Handle(t.Context(), dhcpPacket(t, dhcpv4.MessageTypeDiscover, madeUp(i), netip.Addr{}))
			if errors.Is(err, errOffersFull) {
				refused++

				continue
			}

			require.NoError(t, err)
		}

		assert.Len(t, s.offers, 64)
		assert.Len(t, s.offeredTo, 64)
		assert.Equal(t, 2000-63, refused)

		// The client with an offer still gets its address; once offers expire, new
		// clients are answered again.
		addr := leaseFor(t, s, client)
		assert.Equal(t, cfg.Pool.Start, addr)

		*now = now.Add(offerHold)
		assert.True(t, s.inPool(leaseFor(t, s, net.HardwareAddr{0x52, 0x54, 0, 0, 0, 0x43})))
	})
}
