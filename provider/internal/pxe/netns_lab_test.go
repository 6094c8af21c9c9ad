//go:build lab

package pxe

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/anvil-metal/anvil/internal/netns"
	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/stretchr/testify/require"
)

// testNet is two network namespaces joined by a veth pair: the server side has
// 10.199.0.1/24 on "vs0", the client side 10.199.0.2/24 on "vc0". Nothing is created in
// the test process's own namespace; deleting the namespaces removes the veth pair.
type testNet struct {
	server, client string
}

const testClientIf = "vc0"

var testClientIP = netip.MustParseAddr("10.199.0.2")

func newTestNet(t *testing.T) *testNet {
	t.Helper()

	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces")
	}

	var id [4]byte
	rand.Read(id[:]) // never fails

	n := &testNet{
		server: "anvil-t-" + hex.EncodeToString(id[:]) + "-s",
		client: "anvil-t-" + hex.EncodeToString(id[:]) + "-c",
	}

	for _, ns := range []string{n.server, n.client} {
		require.NoError(t, netns.Create(ns))
		t.Cleanup(func() {
			if err := netns.Delete(ns); err != nil {
				t.Errorf("error deleting netns %s: %v", ns, err)
			}
		})
	}

	server, err := netns.OpenLinks(n.server)
	require.NoError(t, err)

	defer server.Close()

	require.NoError(t, server.AddVeth(testServerIf, testClientIf, n.client))

	client, err := netns.OpenLinks(n.client)
	require.NoError(t, err)

	defer client.Close()

	for _, side := range []struct {
		links *netns.Links
		dev   string
		addr  netip.Addr
	}{
		{server, testServerIf, testServerIP},
		{client, testClientIf, testClientIP},
	} {
		require.NoError(t, side.links.AddAddr(side.dev, netip.PrefixFrom(side.addr, 24)))
		require.NoError(t, side.links.SetUp(side.dev))
		require.NoError(t, side.links.SetUp("lo"))
	}

	return n
}

// inNetns runs f inside the namespace, on a thread of its own; sockets f opens stay in
// the namespace whichever thread uses them later.
func inNetns(ns string, f func() error) <-chan error {
	done := make(chan error, 1)

	go func() { done <- netns.Do(ns, f) }()

	return done
}

// runServer runs run (which must bind before it blocks) in the namespace until the test
// ends, and checks it stops cleanly.
func runServer(t *testing.T, ns string, run func(ctx context.Context) error) {
	t.Helper()

	ctx, cancel := context.WithCancel(t.Context())
	done := inNetns(ns, func() error { return run(ctx) })

	t.Cleanup(func() {
		cancel()

		select {
		case err := <-done:
			if err != nil {
				t.Errorf("server: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("server did not stop")
		}
	})
}

// testClient is a UDP socket in the client namespace.
type testClient struct {
	conn *net.UDPConn
}

func newTestClient(t *testing.T, n *testNet, port int) *testClient {
	t.Helper()

	var conn *net.UDPConn

	err := <-inNetns(n.client, func() error {
		var err error

		conn, err = listenUDP(t.Context(), testClientIf, port)

		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { conn.Close() })

	return &testClient{conn: conn}
}

var errNoReply = errors.New("no reply")

// exchange sends req to dst up to tries times (a server may still be binding) and
// returns the first reply with the same transaction ID, or errNoReply.
func (c *testClient) exchange(req *dhcpv4.DHCPv4, dst netip.AddrPort, tries int, wait time.Duration) (*dhcpv4.DHCPv4, netip.AddrPort, error) {
	buf := make([]byte, maxPacket)

	for range tries {
		if _, err := c.conn.WriteToUDPAddrPort(req.ToBytes(), dst); err != nil {
			return nil, netip.AddrPort{}, fmt.Errorf("error sending: %w", err)
		}

		deadline := time.Now().Add(wait)
		_ = c.conn.SetReadDeadline(deadline) // fails only on a closed conn, which the read then reports

		for time.Now().Before(deadline) {
			n, src, err := c.conn.ReadFromUDPAddrPort(buf)
			if err != nil {
				break // deadline
			}

			resp, err := dhcpv4.FromBytes(buf[:n])
			if err != nil || resp.TransactionID != req.TransactionID || resp.OpCode != dhcpv4.OpcodeBootReply {
				continue
			}

			return resp, src, nil
		}
	}

	return nil, netip.AddrPort{}, errNoReply
}
