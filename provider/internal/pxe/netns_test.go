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
	"os/exec"
	"runtime"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"golang.org/x/sys/unix"
)

// testNet is two network namespaces joined by a veth pair: the server side has
// 10.199.0.1/24 on "vs0", the client side 10.199.0.2/24 on "vc0". Nothing is created in
// the test process's own namespace; deleting the namespaces removes the veth pair.
type testNet struct {
	server, client string
}

const (
	testServerIf = "vs0"
	testClientIf = "vc0"
)

var (
	testServerIP = netip.MustParseAddr("10.199.0.1")
	testClientIP = netip.MustParseAddr("10.199.0.2")
)

func newTestNet(t *testing.T) *testNet {
	t.Helper()

	if os.Geteuid() != 0 {
		t.Skip("needs root and ip netns: not running as root")
	}

	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs root and ip netns: no ip command")
	}

	var id [4]byte
	rand.Read(id[:]) // never fails

	n := &testNet{
		server: "anvil-t-" + hex.EncodeToString(id[:]) + "-s",
		client: "anvil-t-" + hex.EncodeToString(id[:]) + "-c",
	}

	for _, ns := range []string{n.server, n.client} {
		ipCmd(t, "netns", "add", ns)
		t.Cleanup(func() {
			if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
				t.Errorf("error deleting netns %s: %v: %s", ns, err, out)
			}
		})
	}

	ipCmd(t, "-n", n.server, "link", "add", testServerIf, "type", "veth", "peer", "name", testClientIf, "netns", n.client)

	for _, side := range []struct{ ns, dev, addr string }{
		{n.server, testServerIf, testServerIP.String() + "/24"},
		{n.client, testClientIf, testClientIP.String() + "/24"},
	} {
		ipCmd(t, "-n", side.ns, "addr", "add", side.addr, "dev", side.dev)
		ipCmd(t, "-n", side.ns, "link", "set", side.dev, "up")
		ipCmd(t, "-n", side.ns, "link", "set", "lo", "up")
	}

	return n
}

func ipCmd(t *testing.T, args ...string) {
	t.Helper()

	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %v: %v: %s", args, err, out)
	}
}

// inNetns runs f on a fresh OS thread moved into the namespace. The thread stays locked
// and dies with the goroutine, so no other goroutine ever runs in that namespace by
// accident; sockets f opens stay in the namespace whichever thread uses them later.
func inNetns(ns string, f func() error) <-chan error {
	done := make(chan error, 1)

	go func() {
		runtime.LockOSThread()

		fd, err := unix.Open("/var/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			done <- fmt.Errorf("error opening netns %s: %w", ns, err)

			return
		}

		err = unix.Setns(fd, unix.CLONE_NEWNET)
		unix.Close(fd)

		if err != nil {
			done <- fmt.Errorf("error entering netns %s: %w", ns, err)

			return
		}

		done <- f()
	}()

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
