package labtest

import (
	"context"
	"crypto/tls"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/hack/internal/labpki"
	"github.com/anvil-metal/anvil/internal/netns"
)

// Impostor answers TLS in the provider's place, in the provider's namespace, with a
// certificate for the provider's own address that another CA signed: what a host that
// took the provider's address on the provisioning network (a spoofed ARP reply, a rogue
// router) presents. Divert sends one machine's connections to the provider's port to it.
// It records every handshake: a client that verifies the provider's CA refuses each, and
// never sends a request.
type Impostor struct {
	lis  net.Listener
	port int

	mu        sync.Mutex
	refused   []string // the handshakes' errors
	completed int
}

// StartImpostor listens in the namespace ns with a certificate for host (the provider's
// address) from a CA of its own; it stops with the test.
func StartImpostor(t testing.TB, ns, host string) *Impostor {
	t.Helper()

	ca, err := labpki.NewCA("impostor")
	require.NoError(t, err)

	pair, err := ca.IssueServer(host)
	require.NoError(t, err)

	cert, err := tls.X509KeyPair(pair.CertPEM, pair.KeyPEM)
	require.NoError(t, err)

	var lis net.Listener

	require.NoError(t, netns.Do(ns, func() error {
		var err error

		// Any address of the lab's own provider namespace: a redirect goes to the
		// address of the interface the connection came in on.
		lis, err = net.Listen("tcp", ":0") //nolint:gosec // see above

		return err
	}))

	addr, ok := lis.Addr().(*net.TCPAddr)
	require.True(t, ok, "a TCP listener's address: %v", lis.Addr())

	imp := &Impostor{lis: lis, port: addr.Port}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}}

	var wg sync.WaitGroup

	wg.Go(func() {
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}

			wg.Go(func() { imp.handshake(tls.Server(conn, cfg)) })
		}
	})

	t.Cleanup(func() {
		lis.Close()
		wg.Wait()
	})

	return imp
}

// handshake records how one client's handshake went, then hangs up.
func (i *Impostor) handshake(conn *tls.Conn) {
	defer conn.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	err := conn.HandshakeContext(ctx)

	i.mu.Lock()
	defer i.mu.Unlock()

	if err != nil {
		i.refused = append(i.refused, err.Error())

		return
	}

	i.completed++
}

// Refused is the errors of the handshakes that failed; Completed counts the others.
func (i *Impostor) Refused() (refused []string, completed int) {
	i.mu.Lock()
	defer i.mu.Unlock()

	return append([]string(nil), i.refused...), i.completed
}

// Divert redirects the TCP connections that the machine with the MAC address mac opens
// to port in the namespace ns (the provider's) to the impostor, from now on; the function
// it returns ends it (connections made meanwhile stay with the impostor).
func (i *Impostor) Divert(t testing.TB, ns, mac string, port int) func() {
	t.Helper()

	_, err := net.ParseMAC(mac)
	require.NoError(t, err, "the machine's MAC address")

	return NFT(t, ns, "impostor", "chain divert {\n"+
		"  type nat hook prerouting priority dstnat; policy accept;\n"+
		"  ether saddr "+mac+" tcp dport "+strconv.Itoa(port)+" redirect to :"+strconv.Itoa(i.port)+"\n"+
		"}")
}
