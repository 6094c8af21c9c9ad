//go:build lab

package pxe

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/anvil-metal/anvil/internal/netns"
	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/iana"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
)

var (
	testClientIP6   = netip.MustParseAddr("fd00:199::2")
	allDHCPServers6 = netip.AddrPortFrom(allDHCPRelayAgentsAndServers.WithZone(testClientIf), dhcpv6ServerPort)
)

// addTestNet6 gives both sides of the test network a ULA (fd00:199::1 and ::2, /64);
// the kernel gives them link-local addresses.
func addTestNet6(t *testing.T, n *testNet) {
	t.Helper()

	for _, side := range []struct {
		ns, dev string
		addr    netip.Addr
	}{
		{n.server, testServerIf, testServerIP6},
		{n.client, testClientIf, testClientIP6},
	} {
		links, err := netns.OpenLinks(side.ns)
		require.NoError(t, err)
		require.NoError(t, links.AddAddr(side.dev, netip.PrefixFrom(side.addr, 64)))
		require.NoError(t, links.Close())
	}
}

// runDHCPv6 runs a DHCPv6 server in the server namespace and returns a function that
// stops it and checks it stopped cleanly (also run at the end of the test).
func runDHCPv6(t *testing.T, n *testNet, cfg DHCPv6Config) (stop func()) {
	t.Helper()

	ctx, cancel := context.WithCancel(t.Context())
	done := inNetns(n.server, func() error {
		s, err := NewDHCPv6(cfg, zaptest.NewLogger(t), NewMetrics(nil))
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

		select {
		case err := <-done:
			assert.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Errorf("DHCPv6 server did not stop")
		}
	}
	t.Cleanup(stop)

	return stop
}

// testClient6 is a UDP socket in the client namespace.
type testClient6 struct {
	conn *net.UDPConn
}

// newTestClient6 binds the client's link-local address, port 546: what firmware sends
// from. The kernel forms that address when the link comes up and refuses to bind it
// until duplicate address detection is done, so this waits for it.
func newTestClient6(t *testing.T, n *testNet) *testClient6 {
	t.Helper()

	links, err := netns.OpenLinks(n.client)
	require.NoError(t, err)

	defer links.Close()

	var conn *net.UDPConn

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		addrs, err := links.Addrs(testClientIf)
		require.NoError(c, err)

		var ll netip.Addr

		for _, p := range addrs {
			if p.Addr().IsLinkLocalUnicast() {
				ll = p.Addr()
			}
		}

		require.True(c, ll.IsValid(), "no link-local address on %s yet", testClientIf)

		err = <-inNetns(n.client, func() error {
			var err error

			conn, err = net.ListenUDP("udp6", &net.UDPAddr{IP: net.IP(ll.AsSlice()), Port: dhcpv6ClientPort, Zone: testClientIf})

			return err
		})
		require.NoError(c, err)
	}, 15*time.Second, 100*time.Millisecond)

	t.Cleanup(func() { conn.Close() })

	return &testClient6{conn: conn}
}

// newTestRelay6 binds the client side's ULA, port 547: a relay agent.
func newTestRelay6(t *testing.T, n *testNet) *testClient6 {
	t.Helper()

	return newTestClient6On(t, n, dhcpv6ServerPort)
}

// newTestBootClient6 binds the client side's ULA, port 4011: EDK2 PXE firmware asking
// the boot server.
func newTestBootClient6(t *testing.T, n *testNet) *testClient6 {
	t.Helper()

	return newTestClient6On(t, n, dhcpv6BootPort)
}

func newTestClient6On(t *testing.T, n *testNet, port int) *testClient6 {
	t.Helper()

	var conn *net.UDPConn

	err := <-inNetns(n.client, func() error {
		var err error

		conn, err = net.ListenUDP("udp6", &net.UDPAddr{IP: net.IP(testClientIP6.AsSlice()), Port: port})

		return err
	})
	require.NoError(t, err)

	t.Cleanup(func() { conn.Close() })

	return &testClient6{conn: conn}
}

// exchange sends msg to dst up to tries times (a server may still be binding) and
// returns the first reply for the same transaction (for a relay message, of the message
// it holds), with where it came from, or errNoReply.
func (c *testClient6) exchange(msg dhcpv6.DHCPv6, dst netip.AddrPort, tries int, wait time.Duration) (dhcpv6.DHCPv6, netip.AddrPort, error) {
	want, err := msg.GetInnerMessage()
	if err != nil {
		return nil, netip.AddrPort{}, err
	}

	buf := make([]byte, maxPacket)

	for range tries {
		if _, err := c.conn.WriteToUDPAddrPort(msg.ToBytes(), dst); err != nil {
			// A multicast route may not be there yet while the link settles.
			if !errors.Is(err, syscall.ENETUNREACH) && !errors.Is(err, syscall.EADDRNOTAVAIL) {
				return nil, netip.AddrPort{}, fmt.Errorf("error sending: %w", err)
			}

			time.Sleep(wait)

			continue
		}

		deadline := time.Now().Add(wait)
		_ = c.conn.SetReadDeadline(deadline) // fails only on a closed conn, which the read then reports

		for time.Now().Before(deadline) {
			n, src, err := c.conn.ReadFromUDPAddrPort(buf)
			if err != nil {
				break // deadline
			}

			resp, err := dhcpv6.FromBytes(buf[:n])
			if err != nil {
				continue
			}

			inner, err := resp.GetInnerMessage()
			if err != nil || inner.TransactionID != want.TransactionID || resp.IsRelay() != msg.IsRelay() {
				continue
			}

			return resp, src, nil
		}
	}

	return nil, netip.AddrPort{}, errNoReply
}

func withXID6(n byte) dhcpv6.Modifier {
	return func(d dhcpv6.DHCPv6) {
		d.(*dhcpv6.Message).TransactionID = dhcpv6.TransactionID{0x1a, 0xb6, n}
	}
}

func testLabConfig6() DHCPv6Config {
	return DHCPv6Config{
		Interface:   testServerIf,
		ScriptURL:   testScriptURL6,
		HTTPBootURL: testHTTPBootURL6,
		TFTPBootURL: testTFTPBootURL6,
	}
}

// serverAddr6 checks a reply came from the server side, port 547: its link-local
// address, or its ULA while the link-local one is still tentative.
func serverAddr6(t *testing.T, from netip.AddrPort) {
	t.Helper()

	assert.Equal(t, uint16(dhcpv6ServerPort), from.Port())
	assert.True(t, from.Addr().IsLinkLocalUnicast() || from.Addr() == testServerIP6, "reply from %s", from)
	assert.NotEqual(t, testClientIP6, from.Addr())
}

func TestLabDHCPv6InformationMode(t *testing.T) {
	t.Parallel()

	n := newTestNet(t)
	addTestNet6(t, n)
	runDHCPv6(t, n, testLabConfig6())

	client := newTestClient6(t, n)

	t.Run("HTTP boot solicit", func(t *testing.T) {
		// The first exchange retries while the server binds.
		resp, from, err := client.exchange(request6(t, dhcpv6.MessageTypeSolicit, kindHTTP, withXID6(1)), allDHCPServers6, 50, 200*time.Millisecond)
		require.NoError(t, err)
		serverAddr6(t, from)

		adv := resp.(*dhcpv6.Message)
		assert.Equal(t, dhcpv6.MessageTypeAdvertise, adv.MessageType)
		assert.Equal(t, testHTTPBootURL6+DefaultUEFIBootFile, adv.Options.BootFileURL())
		assert.Equal(t, [][]byte{[]byte("HTTPClient")}, adv.Options.VendorClass(enterprisePXE))
		assert.Equal(t, testClientDUID6.ToBytes(), adv.Options.ClientID().ToBytes())
		require.NotNil(t, adv.Options.ServerID())

		// The server DUID is the interface's DUID-LL.
		duid, ok := adv.Options.ServerID().(*dhcpv6.DUIDLL)
		require.True(t, ok, "server ID %s", adv.Options.ServerID())
		assert.Equal(t, iana.HWTypeEthernet, duid.HWType)
		assert.Len(t, duid.LinkLayerAddr, 6)

		// No address from the boot server, and no IA_NA saying so (EDK2 drops that).
		assert.Empty(t, adv.Options.IANA())
		assert.Nil(t, adv.Options.Status())
	})

	t.Run("iPXE information-request", func(t *testing.T) {
		resp, from, err := client.exchange(request6(t, dhcpv6.MessageTypeInformationRequest, kindIPXE, withXID6(2)), allDHCPServers6, 3, time.Second)
		require.NoError(t, err)
		serverAddr6(t, from)

		reply := resp.(*dhcpv6.Message)
		assert.Equal(t, dhcpv6.MessageTypeReply, reply.MessageType)
		assert.Equal(t, testScriptURL6, reply.Options.BootFileURL())
		assert.Empty(t, reply.Options.IANA())
	})

	t.Run("UEFI PXE solicit", func(t *testing.T) {
		resp, _, err := client.exchange(request6(t, dhcpv6.MessageTypeSolicit, kindPXE, withXID6(3)), allDHCPServers6, 3, time.Second)
		require.NoError(t, err)

		adv := resp.(*dhcpv6.Message)
		assert.Equal(t, testTFTPBootURL6+DefaultUEFIBootFile, adv.Options.BootFileURL())
		assert.Equal(t, [][]byte{[]byte("PXEClient")}, adv.Options.VendorClass(enterprisePXE))
	})

	t.Run("UEFI PXE asks the boot server port", func(t *testing.T) {
		resp, _, err := client.exchange(request6(t, dhcpv6.MessageTypeSolicit, kindPXE, withXID6(6)), allDHCPServers6, 3, time.Second)
		require.NoError(t, err)

		// EDK2 asks the boot URL's host on 4011, from 4011, with a REQUEST naming the
		// proxy offer's server and no IA.
		bootClient := newTestBootClient6(t, n)
		req := request6(t, dhcpv6.MessageTypeRequest, kindPXE, withXID6(7), withoutOption6(dhcpv6.OptionIANA),
			withServerID6(resp.(*dhcpv6.Message).Options.ServerID()))
		bootServer := netip.AddrPortFrom(testServerIP6, dhcpv6BootPort)

		resp, from, err := bootClient.exchange(req, bootServer, 3, time.Second)
		require.NoError(t, err)
		assert.Equal(t, bootServer, from)

		reply := resp.(*dhcpv6.Message)
		assert.Equal(t, dhcpv6.MessageTypeReply, reply.MessageType)
		assert.Equal(t, testTFTPBootURL6+DefaultUEFIBootFile, reply.Options.BootFileURL())
		assert.Equal(t, [][]byte{[]byte("PXEClient")}, reply.Options.VendorClass(enterprisePXE))
	})

	t.Run("non-boot solicit gets nothing", func(t *testing.T) {
		_, _, err := client.exchange(request6(t, dhcpv6.MessageTypeSolicit, kindPlain, withXID6(4)), allDHCPServers6, 1, 500*time.Millisecond)
		require.ErrorIs(t, err, errNoReply)
	})

	t.Run("relayed solicit is answered to the relay", func(t *testing.T) {
		relay := newTestRelay6(t, n)

		fwd, err := dhcpv6.EncapsulateRelay(request6(t, dhcpv6.MessageTypeSolicit, kindHTTP, withXID6(5)), dhcpv6.MessageTypeRelayForward,
			net.ParseIP("2001:db8:7::1"), net.ParseIP("fe80::5054:ff:fe12:3456"))
		require.NoError(t, err)
		fwd.AddOption(dhcpv6.OptInterfaceID([]byte("eth7")))

		resp, from, err := relay.exchange(fwd, netip.AddrPortFrom(testServerIP6, dhcpv6ServerPort), 3, time.Second)
		require.NoError(t, err)
		assert.Equal(t, netip.AddrPortFrom(testServerIP6, dhcpv6ServerPort), from)

		repl := resp.(*dhcpv6.RelayMessage)
		assert.Equal(t, dhcpv6.MessageTypeRelayReply, repl.MessageType)
		assert.Equal(t, []byte("eth7"), repl.Options.InterfaceID())

		inner, err := repl.GetInnerMessage()
		require.NoError(t, err)
		assert.Equal(t, testHTTPBootURL6+DefaultUEFIBootFile, inner.Options.BootFileURL())
	})
}

func TestLabDHCPv6FullMode(t *testing.T) {
	t.Parallel()

	n := newTestNet(t)
	addTestNet6(t, n)

	cfg := testLabConfig6()
	cfg.Pool = &DHCPv6Pool{Prefix: testPrefix6, DNS: []netip.Addr{testDNS6}}

	stop := runDHCPv6(t, n, cfg)
	client := newTestClient6(t, n)

	// solicitRequest runs SOLICIT then REQUEST and returns the address the server gave.
	solicitRequest := func(t *testing.T, kind string, xid byte, tries int) (netip.Addr, *dhcpv6.Message) {
		t.Helper()

		resp, from, err := client.exchange(request6(t, dhcpv6.MessageTypeSolicit, kind, withXID6(xid)), allDHCPServers6, tries, 200*time.Millisecond)
		require.NoError(t, err)
		serverAddr6(t, from)

		adv := resp.(*dhcpv6.Message)
		require.Equal(t, dhcpv6.MessageTypeAdvertise, adv.MessageType)
		require.Len(t, adv.Options.IANA(), 1)
		require.Len(t, adv.Options.IANA()[0].Options.Addresses(), 1)

		offered, ok := netip.AddrFromSlice(adv.Options.IANA()[0].Options.Addresses()[0].IPv6Addr)
		require.True(t, ok)

		req := request6(t, dhcpv6.MessageTypeRequest, kind, withXID6(xid+1), withServerID6(adv.Options.ServerID()), withIAAddr(offered.String()))

		resp, _, err = client.exchange(req, allDHCPServers6, 3, time.Second)
		require.NoError(t, err)

		reply := resp.(*dhcpv6.Message)
		require.Equal(t, dhcpv6.MessageTypeReply, reply.MessageType)
		require.Len(t, reply.Options.IANA(), 1)

		addrs := reply.Options.IANA()[0].Options.Addresses()
		require.Len(t, addrs, 1)

		got, ok := netip.AddrFromSlice(addrs[0].IPv6Addr)
		require.True(t, ok)
		assert.Equal(t, offered, got)
		assert.True(t, testPrefix6.Contains(got), "%s outside %s", got, testPrefix6)
		assert.NotEqual(t, testServerIP6, got)
		assert.Equal(t, time.Hour, addrs[0].PreferredLifetime)
		require.Len(t, reply.Options.DNS(), 1)
		assert.Equal(t, testDNS6.String(), reply.Options.DNS()[0].String())

		return got, reply
	}

	// The first exchange retries while the server binds.
	addr, reply := solicitRequest(t, kindPlain, 10, 50)
	assert.Empty(t, reply.Options.BootFileURL())

	bootAddr, reply := solicitRequest(t, kindHTTP, 20, 3)
	assert.Equal(t, testHTTPBootURL6+DefaultUEFIBootFile, reply.Options.BootFileURL())
	assert.Equal(t, addr, bootAddr, "same DUID and IAID, same address")

	// A restart keeps no state and changes no address.
	stop()
	runDHCPv6(t, n, cfg)

	again, reply := solicitRequest(t, kindPlain, 30, 50)
	assert.Equal(t, addr, again)

	// RENEW gets the same address; RELEASE is acknowledged.
	serverID := withServerID6(reply.Options.ServerID())
	renew := request6(t, dhcpv6.MessageTypeRenew, kindPlain, withXID6(40), serverID, withIAAddr(addr.String()))

	resp, _, err := client.exchange(renew, allDHCPServers6, 3, time.Second)
	require.NoError(t, err)

	renewed := resp.(*dhcpv6.Message)
	require.Len(t, renewed.Options.IANA(), 1)
	require.Len(t, renewed.Options.IANA()[0].Options.Addresses(), 1)
	assert.Equal(t, addr.String(), renewed.Options.IANA()[0].Options.Addresses()[0].IPv6Addr.String())

	resp, _, err = client.exchange(request6(t, dhcpv6.MessageTypeRelease, kindPlain, withXID6(41), serverID, withIAAddr(addr.String())), allDHCPServers6, 3, time.Second)
	require.NoError(t, err)

	released := resp.(*dhcpv6.Message)
	require.NotNil(t, released.Options.Status())
	assert.Equal(t, iana.StatusSuccess, released.Options.Status().StatusCode)
}
