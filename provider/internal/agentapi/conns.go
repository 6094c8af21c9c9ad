package agentapi

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// Limits on the agent API's connections: what a client that never says a valid hello can
// hold of the provider.
const (
	// maxStreamsPerConn is how many sessions one connection carries at once (HTTP/2's
	// SETTINGS_MAX_CONCURRENT_STREAMS; gRPC's default is unbounded): an agent keeps one,
	// and a reconnecting agent's new session may start before its old one is torn down.
	maxStreamsPerConn = 4
	// maxUnhelloedPerConn is how many sessions one connection may open that do not say a
	// valid hello, waiting for one (30 s each) or refused. An agent opens one at a time
	// and retries a refused one after a backoff (0.5 s, doubling), so a few cover an
	// agent whose session failed; past them the next session is refused and the
	// connection closed: every few tokens tried cost a client a TLS handshake.
	maxUnhelloedPerConn = 4
	// maxSessionlessPerAddress is how many connections one IP address may hold without a
	// session on them (in their TLS handshake, 20 s; waiting for a hello, 30 s; idle, a
	// minute). An agent holds one, and one more while it reconnects; 16 leave room for a
	// few machines behind one address (a NAT) reconnecting together after a provider
	// restart. Past it a new connection from that address is closed at once.
	maxSessionlessPerAddress = 16
	// refusedConnLinger is how long a connection refused for its sessions stays open
	// after the refusal, so that the refusal's status reaches the client before the
	// connection goes (sessions it opens meanwhile are refused too).
	refusedConnLinger = 100 * time.Millisecond
)

// Reasons an agent API connection (or one of its sessions) was refused, as
// anvil_agent_connections_refused_total labels them.
const (
	connRefusedAddress   = "address"
	connRefusedUnhelloed = "unhelloed"
)

// connTracker keeps the agent API's connections: each one's sessions, and per remote
// address the connections without a session. Sessions find their connection by its
// remote address (gRPC's peer), unique among live TCP connections to one port.
type connTracker struct {
	refused *prometheus.CounterVec

	mu          sync.Mutex
	byAddr      map[string]*agentConn
	sessionless map[netip.Addr]int
}

func newConnTracker(reg prometheus.Registerer) *connTracker {
	t := &connTracker{
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "anvil_agent_connections_refused_total",
			Help: "Agent API connections closed by the provider's limits: too many without a session from one address, too many sessions without a valid hello on one.",
		}, []string{"reason"}),
		byAddr:      map[string]*agentConn{},
		sessionless: map[netip.Addr]int{},
	}

	for _, reason := range []string{connRefusedAddress, connRefusedUnhelloed} {
		t.refused.WithLabelValues(reason)
	}

	if reg != nil {
		reg.MustRegister(t.refused)
	}

	return t
}

// Listener returns lis with the agent API's per-address and per-connection limits: serve
// the gRPC server (GRPCServer) on it.
func (s *Server) Listener(lis net.Listener) net.Listener {
	return &limitedListener{Listener: lis, t: s.conns}
}

type limitedListener struct {
	net.Listener

	t *connTracker
}

// Accept returns the next connection its address may open; those past the address's
// bound are closed.
func (l *limitedListener) Accept() (net.Conn, error) {
	for {
		conn, err := l.Listener.Accept()
		if err != nil {
			return nil, err //nolint:wrapcheck // the listener's own error, which gRPC's Serve reads
		}

		if c := l.t.admit(conn); c != nil {
			return c, nil
		}

		conn.Close()
	}
}

// admit tracks conn, or returns nil when its address holds too many connections without
// a session already.
func (t *connTracker) admit(conn net.Conn) *agentConn {
	c := &agentConn{Conn: conn, t: t, key: conn.RemoteAddr().String()}

	// Loopback is not the provisioning network: a client on the provider's host (the
	// fleet benchmark's 10,000 simulated agents share 127.0.0.1) is not bounded.
	if ap, err := netip.ParseAddrPort(c.key); err == nil && !ap.Addr().Unmap().IsLoopback() {
		c.ip = ap.Addr().Unmap()
	}

	t.mu.Lock()
	defer t.mu.Unlock()

	if c.ip.IsValid() {
		if t.sessionless[c.ip] >= maxSessionlessPerAddress {
			t.refused.WithLabelValues(connRefusedAddress).Inc()

			return nil
		}

		t.sessionless[c.ip]++
	}

	t.byAddr[c.key] = c

	return c
}

// of returns the connection a session came on; nil when the server was not served on
// Listener (every method of a nil *agentConn allows).
func (t *connTracker) of(ctx context.Context) *agentConn {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return nil
	}

	t.mu.Lock()
	defer t.mu.Unlock()

	return t.byAddr[p.Addr.String()]
}

// unsessioned drops a connection from its address's count. Called with mu held.
func (t *connTracker) unsessioned(ip netip.Addr) {
	if !ip.IsValid() {
		return
	}

	if t.sessionless[ip]--; t.sessionless[ip] <= 0 {
		delete(t.sessionless, ip)
	}
}

// agentConn is one agent API connection.
type agentConn struct {
	net.Conn

	t   *connTracker
	key string
	// ip is the remote address counted; invalid when it is not counted (loopback).
	ip netip.Addr

	// Guarded by t.mu. The connection counts against its address while it is open
	// without a session.
	sessions  int  // sessions with a valid hello, under way
	unhelloed int  // sessions opened without a valid hello (waiting, or refused)
	refusing  bool // refused for its sessions: closed after refusedConnLinger
	closed    bool

	closeOnce sync.Once
}

// openSession counts a session opened on the connection; an error refuses it, past
// maxUnhelloedPerConn, and the connection is closed.
func (c *agentConn) openSession() error {
	if c == nil {
		return nil
	}

	c.t.mu.Lock()
	defer c.t.mu.Unlock()

	if c.refusing || c.unhelloed >= maxUnhelloedPerConn {
		if !c.refusing {
			c.refusing = true
			c.t.refused.WithLabelValues(connRefusedUnhelloed).Inc()
			time.AfterFunc(refusedConnLinger, func() { c.Close() })
		}

		return status.Errorf(codes.ResourceExhausted, "more than %d sessions without a valid hello on this connection: connect again", maxUnhelloedPerConn)
	}

	c.unhelloed++

	return nil
}

// helloed records that the session opened last said a valid hello; the function it
// returns records the session's end.
func (c *agentConn) helloed() func() {
	if c == nil {
		return func() {}
	}

	c.t.mu.Lock()
	defer c.t.mu.Unlock()

	c.unhelloed--
	c.sessions++

	if c.sessions == 1 && !c.closed {
		c.t.unsessioned(c.ip)
	}

	return func() {
		c.t.mu.Lock()
		defer c.t.mu.Unlock()

		c.sessions--

		// Without a session again: counted again, unless it is gone.
		if c.sessions == 0 && !c.closed && c.ip.IsValid() {
			c.t.sessionless[c.ip]++
		}
	}
}

// Close implements net.Conn: the connection is no longer tracked.
func (c *agentConn) Close() error {
	c.closeOnce.Do(func() {
		c.t.mu.Lock()
		defer c.t.mu.Unlock()

		if c.sessions == 0 {
			c.t.unsessioned(c.ip)
		}

		c.closed = true

		if c.t.byAddr[c.key] == c {
			delete(c.t.byAddr, c.key)
		}
	})

	return c.Conn.Close() //nolint:wrapcheck // the connection's own error, as gRPC reads it
}
