package agentapi_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	agentv1 "github.com/anvil-metal/anvil/api/agent/v1"
	"github.com/anvil-metal/anvil/internal/token"
	"github.com/anvil-metal/anvil/provider/internal/agentapi"
	"github.com/anvil-metal/anvil/provider/internal/controllers"
	"github.com/anvil-metal/anvil/provider/internal/lifecycle"
	"github.com/anvil-metal/anvil/provider/internal/machineview"
	"github.com/anvil-metal/anvil/provider/internal/pki"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// limitedFixture is the agent API served as the provider serves it, on its Listener over
// loopback TLS; every connection looks to the server as if it came from remoteIP.
type limitedFixture struct {
	addr  string
	key   []byte
	creds credentials.TransportCredentials
}

func newLimitedFixture(t *testing.T, remoteIP string) *limitedFixture {
	t.Helper()

	dir := t.TempDir()

	store, err := resources.Open(t.Context(), dir)
	require.NoError(t, err)
	t.Cleanup(func() { store.Close() })

	return serveAgents(t, store, dir, remoteIP)
}

// serveAgents serves the agent API on the store (its CA in dir), as a provider started on
// it does.
func serveAgents(t *testing.T, store *resources.Store, dir, remoteIP string) *limitedFixture {
	t.Helper()

	ca, err := pki.Load(dir)
	require.NoError(t, err)

	view := machineview.New()
	ctx, cancel := context.WithCancel(context.Background())
	viewDone := make(chan error, 1)

	go func() { viewDone <- view.Run(ctx, store) }()

	<-view.Ready()

	srvTLS, err := ca.ServerTLS([]string{"127.0.0.1"})
	require.NoError(t, err)

	agents := agentapi.New(agentapi.Options{
		View: view, TokenKey: store.Keys().TokenKey(), Recorder: &recorder{},
		Policy:       lifecycle.Policy{RejectedThen: lifecycle.RejectedReboot, Kexec: resources.KexecNever},
		Observations: make(chan controllers.PXEObservation, 64),
		Logger:       zaptest.NewLogger(t),
	})
	srv := agents.GRPCServer(grpc.Creds(credentials.NewTLS(srvTLS)))

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)

	go srv.Serve(agents.Listener(&fromListener{Listener: lis, ip: net.ParseIP(remoteIP)})) //nolint:errcheck // ends with Stop

	t.Cleanup(func() {
		srv.Stop()
		cancel()
		<-viewDone //nolint:errcheck // the view's end, not its error, is waited for
	})

	roots := x509.NewCertPool()
	roots.AddCert(mustParse(t, ca))

	return &limitedFixture{
		addr: lis.Addr().String(), key: store.Keys().TokenKey(),
		creds: credentials.NewTLS(&tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}),
	}
}

// client is a new connection's agent API client.
func (f *limitedFixture) client(t *testing.T) agentv1.AgentServiceClient {
	t.Helper()

	conn, err := grpc.NewClient(f.addr, grpc.WithTransportCredentials(f.creds))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })

	return agentv1.NewAgentServiceClient(conn)
}

func (f *limitedFixture) token(id string) string {
	return token.Sign(f.key, token.Claims{Kind: token.KindAgent, MachineID: id, Issued: time.Now()})
}

// session opens a session and says hello; it returns the session once welcomed.
func session(ctx context.Context, c agentv1.AgentServiceClient, id, tok string) (agentv1.AgentService_SessionClient, error) {
	stream, err := c.Session(ctx)
	if err != nil {
		return nil, err
	}

	if err = stream.Send(&agentv1.AgentMessage{Message: &agentv1.AgentMessage_Hello{Hello: &agentv1.Hello{MachineId: id, Token: tok}}}); err != nil {
		// io.EOF: the provider ended the stream before the hello went (a refused
		// session is ended at once); why is the status Recv returns.
		if errors.Is(err, io.EOF) {
			for {
				if _, err = stream.Recv(); err != nil {
					break
				}
			}
		}

		return nil, err
	}

	msg, err := stream.Recv()
	if err != nil {
		return nil, err
	}

	if msg.GetWelcome() == nil {
		return nil, errors.New("no welcome")
	}

	return stream, nil
}

// fromListener makes every connection's remote address ip (the test's port kept).
type fromListener struct {
	net.Listener

	ip net.IP
}

func (l *fromListener) Accept() (net.Conn, error) {
	conn, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}

	port := conn.RemoteAddr().(*net.TCPAddr).Port

	return &fromConn{Conn: conn, remote: &net.TCPAddr{IP: l.ip, Port: port}}, nil
}

type fromConn struct {
	net.Conn

	remote net.Addr
}

func (c *fromConn) RemoteAddr() net.Addr { return c.remote }

// TestStreamsPerConnectionBounded: one connection carries at most a few sessions at once;
// the next waits for one of them to end.
func TestStreamsPerConnectionBounded(t *testing.T) {
	t.Parallel()

	f := newLimitedFixture(t, "192.0.2.1")
	c := f.client(t)

	streams := make([]context.CancelFunc, 0, 4)

	for i := range 4 {
		ctx, cancel := context.WithCancel(t.Context())
		streams = append(streams, cancel)

		id := fmt.Sprintf("m%d", i)
		_, err := session(ctx, c, id, f.token(id))
		require.NoError(t, err, "session %d", i)
	}

	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()

	_, err := session(ctx, c, "m4", f.token("m4"))
	require.Error(t, err, "a fifth session at once on one connection")
	assert.Equal(t, codes.DeadlineExceeded, status.Code(err))

	// One ends: the next may start.
	streams[0]()

	_, err = session(t.Context(), c, "m4", f.token("m4"))
	require.NoError(t, err)

	for _, cancel := range streams[1:] {
		cancel()
	}
}

// TestUnhelloedSessionsPerConnectionBounded: a connection that keeps opening sessions
// without a valid hello is refused and closed; a new connection starts afresh.
func TestUnhelloedSessionsPerConnectionBounded(t *testing.T) {
	t.Parallel()

	f := newLimitedFixture(t, "192.0.2.1")
	c := f.client(t)

	for i := range 4 {
		_, err := session(t.Context(), c, "m1", "v1.guessed")
		assert.Equal(t, codes.Unauthenticated, status.Code(err), "try %d", i)
	}

	_, err := session(t.Context(), c, "m1", "v1.guessed")
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	assert.Contains(t, status.Convert(err).Message(), "without a valid hello")

	// The connection was closed: the client dials again, and an agent with its token is
	// welcomed on the new one.
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()

		_, err := session(ctx, c, "m1", f.token("m1"))

		return err == nil
	}, 5*time.Second, 50*time.Millisecond)
}

// TestSessionlessConnectionsPerAddressBounded: one address holds at most a few
// connections without a session (here in their TLS handshake, never finished); the next
// is closed at once. A connection with a session does not count.
func TestSessionlessConnectionsPerAddressBounded(t *testing.T) {
	t.Parallel()

	const bound = 16 // maxSessionlessPerAddress

	f := newLimitedFixture(t, "192.0.2.1")

	// An agent's connection, with its session, is not one of them.
	_, err := session(t.Context(), f.client(t), "m1", f.token("m1"))
	require.NoError(t, err)

	dial := func() net.Conn {
		conn, err := net.Dial("tcp", f.addr)
		require.NoError(t, err)
		t.Cleanup(func() { conn.Close() })

		return conn
	}

	// closed says whether the server closed conn within wait.
	closed := func(conn net.Conn, wait time.Duration) bool {
		require.NoError(t, conn.SetReadDeadline(time.Now().Add(wait)))

		_, err := conn.Read(make([]byte, 1))

		return errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || (err != nil && !errors.Is(err, os.ErrDeadlineExceeded))
	}

	held := make([]net.Conn, 0, bound)
	for range bound {
		held = append(held, dial())
	}

	for i, conn := range held {
		assert.False(t, closed(conn, 50*time.Millisecond), "connection %d is held", i)
	}

	assert.True(t, closed(dial(), 2*time.Second), "one more from the same address is closed at once")

	// One goes: there is room for one more.
	held[0].Close()

	require.Eventually(t, func() bool { return !closed(dial(), 200*time.Millisecond) }, 5*time.Second, 10*time.Millisecond)
}
