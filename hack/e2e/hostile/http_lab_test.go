//go:build lab

package hostile

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// The provider's bounds on a connection that does not get on with it (the limit a test
// allows is the bound plus a margin for a loaded machine).
const (
	// http.Server.ReadHeaderTimeout: a request's headers must be in by then.
	headerBound = 10 * time.Second
	// portmux: a connection must say whether it is TLS within this.
	firstByteBound = 10 * time.Second
	// http.Server.IdleTimeout: a keep-alive connection with no request is closed.
	idleBound = 30 * time.Second
	// The agent API's TLS and HTTP/2 preface (gRPC's ConnectionTimeout).
	handshakeBound = 20 * time.Second
	// An agent API connection with no session on it: gRPC's MaxConnectionIdle, then 5 s
	// for the client to acknowledge its GOAWAY.
	agentIdleBound = time.Minute + 5*time.Second
	margin         = 15 * time.Second
)

// held is a kind of connection an attacker holds open, and how it holds it.
type held struct {
	name  string
	count int
	// open opens and starts the connection; hold, if set, then keeps it going.
	open  func(ctx context.Context) (net.Conn, error)
	hold  func(conn net.Conn) error
	bound time.Duration
}

// attackHeldConnections opens each kind's connections at once and checks the provider
// closes every one within its bound, while a real client's requests still get answers.
func attackHeldConnections(ctx context.Context, t *testing.T, a attacker) {
	slowHeader := func(ctx context.Context) (net.Conn, error) {
		conn, err := a.dial(ctx, a.api)
		if err == nil {
			_, err = conn.Write([]byte("GET /healthz HTTP/1.1\r\nHost: " + a.api + "\r\n"))
		}

		return conn, err
	}

	kinds := []held{
		{name: "silent (no first byte)", count: 100, bound: firstByteBound, open: func(ctx context.Context) (net.Conn, error) { return a.dial(ctx, a.api) }},
		{
			name: "slowloris (a header line every 2 s)", count: 200, bound: headerBound, open: slowHeader,
			hold: func(conn net.Conn) error {
				_, err := conn.Write([]byte("X-Slow: 1\r\n"))

				return err
			},
		},
		{name: "idle keep-alive (one request, then nothing)", count: 100, bound: idleBound, open: func(ctx context.Context) (net.Conn, error) {
			conn, err := a.dial(ctx, a.api)
			if err != nil {
				return nil, err
			}

			if _, err = conn.Write([]byte("GET /healthz HTTP/1.1\r\nHost: " + a.api + "\r\n\r\n")); err != nil {
				return conn, err
			}

			// Read the answer, so that the connection is idle when we start waiting.
			_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second)) // an open conn
			buf := make([]byte, 4096)
			_, err = conn.Read(buf)

			return conn, err
		}},
		{name: "half-open TLS (a ClientHello's first bytes)", count: 100, bound: handshakeBound, open: func(ctx context.Context) (net.Conn, error) {
			conn, err := a.dial(ctx, a.api)
			if err == nil {
				// A handshake record of 512 bytes, of which 9 arrive.
				_, err = conn.Write([]byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc})
			}

			return conn, err
		}},
		{name: "TLS done, no HTTP/2 preface", count: 30, bound: handshakeBound, open: func(ctx context.Context) (net.Conn, error) {
			return a.tlsConn(ctx)
		}},
		{name: "HTTP/2 up on the agent API, no session", count: 30, bound: agentIdleBound, open: func(ctx context.Context) (net.Conn, error) {
			conn, err := a.tlsConn(ctx)
			if err == nil {
				// The client preface, then an empty SETTINGS frame.
				_, err = conn.Write(append([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), 0, 0, 0, 4, 0, 0, 0, 0, 0))
			}

			return conn, err
		}},
	}

	var wg sync.WaitGroup

	for _, k := range kinds {
		wg.Add(1)

		go func() {
			defer wg.Done()

			holdKind(ctx, t, k)
		}()
	}

	// Meanwhile a well-behaved client is answered.
	c := a.httpClient()
	defer c.CloseIdleConnections()
	answered := 0

	for i := range 20 {
		if ctx.Err() != nil {
			break
		}

		status, _, err := a.get(ctx, c, "/healthz")
		if assert.NoError(t, err, "a real request during the held connections (%d)", i) && assert.Equal(t, http.StatusOK, status) {
			answered++
		}

		time.Sleep(time.Second)
	}

	wg.Wait()
	t.Logf("http: %d/20 health requests answered while the connections were held", answered)
}

// tlsConn is a TLS connection to the agent API that offers HTTP/2, handshake done.
func (a attacker) tlsConn(ctx context.Context) (net.Conn, error) {
	raw, err := a.dial(ctx, a.api)
	if err != nil {
		return nil, err
	}

	conn := tls.Client(raw, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}}) // the attacker trusts anything

	hctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()

	return conn, conn.HandshakeContext(hctx)
}

// holdKind opens k's connections, keeps them going, and reports those the provider left
// open past the bound.
func holdKind(ctx context.Context, t *testing.T, k held) {
	type result struct {
		took   time.Duration
		closed bool
		err    error
	}

	results := make(chan result, k.count)

	for range k.count {
		go func() {
			start := time.Now()

			conn, err := k.open(ctx)
			if err != nil {
				if conn != nil {
					conn.Close()
				}

				results <- result{err: err}

				return
			}

			defer conn.Close()

			limit := k.bound + margin
			took, closed := time.Duration(0), false

			for !closed && time.Since(start) < limit && ctx.Err() == nil {
				// Between two reads (1 s each), the slowloris sends its next line.
				took, closed = closedWithin(conn, start, min(limit, time.Since(start)+2*time.Second))
				if !closed && k.hold != nil {
					if err := k.hold(conn); err != nil {
						took, closed = time.Since(start), true // a write to a closed conn
					}
				}
			}

			results <- result{took: took, closed: closed}
		}()
	}

	var (
		closed, failed int
		slowest        time.Duration
		firstErr       error
	)

	for range k.count {
		r := <-results

		switch {
		case errors.Is(r.err, syscall.ECONNRESET), errors.Is(r.err, io.EOF):
			// Refused at once: past the agent API's bound on connections without a
			// session from one address, the provider closes the connection before its
			// TLS hello (an EOF where the API port had read the client's whole hello, a
			// reset where some of it was left unread).
			closed++
		case r.err != nil:
			failed++

			if firstErr == nil {
				firstErr = r.err
			}
		case r.closed:
			closed++
			slowest = max(slowest, r.took)
		}
	}

	assert.Zero(t, failed, "%s: connections that could not be opened (first: %v)", k.name, firstErr)
	assert.Equal(t, k.count-failed, closed, "%s: the provider closes (or refuses) each within %s (+%s)", k.name, k.bound, margin)
	t.Logf("http: %s: %d/%d closed by the provider, the last after %s (bound %s)", k.name, closed, k.count, slowest.Round(100*time.Millisecond), k.bound)
}

// attackHTTPPaths asks the HTTP routes for files outside what they serve: dot segments,
// escaped and not, and a symlink the test put in the agent's asset directory.
func attackHTTPPaths(ctx context.Context, t *testing.T, a attacker) {
	paths := []string{
		"/assets/agent/..%2f..%2f..%2f..%2fetc%2fpasswd",
		"/assets/agent/%2e%2e%2f%2e%2e%2fetc%2fpasswd",
		"/assets/agent/../../../../etc/passwd",
		"/assets/agent/..",
		"/assets/agent/escape-file", // a symlink to /etc/passwd beside the agent's assets
		"/assets/agent/cmdline-amd64",
		"/assets/agent/%00",
		"/assets/talos/..%2f..%2f..%2fetc/v1.9.0/passwd",
		"/assets/talos/x/..%2f..%2f..%2fetc/passwd",
		"/assets/talos/x/v1.9.0/..%2f..%2f..%2f..%2fetc%2fpasswd",
		"/assets/talos/x/v1.9.0/kernel-amd64%00",
		"/metadata/..%2f..%2fetc%2fpasswd?token=x",
		"/ipxe/../../../etc/passwd",
		"/ipxe/boot.ipxe/../../../../etc/passwd",
		"/" + strings.Repeat("..%2f", 100) + "etc/passwd",
	}

	c := a.httpClient()
	defer c.CloseIdleConnections()

	for _, p := range paths {
		status, body, err := a.get(ctx, c, p)
		if !assert.NoError(t, err, "GET %s", p) {
			continue
		}

		assert.NotEqual(t, http.StatusOK, status, "GET %s is refused", p)
		assert.NotContains(t, body, "root:x:0:0", "GET %s serves no file from outside", p)
	}

	t.Logf("http: %d traversal/symlink paths refused", len(paths))
}

// headerFlood sends one request with more header than the server takes.
func headerFlood(ctx context.Context, t *testing.T, a attacker) {
	conn, err := a.dial(ctx, a.api)
	if !assert.NoError(t, err) {
		return
	}

	defer conn.Close()

	_ = conn.SetDeadline(time.Now().Add(20 * time.Second)) // an open conn

	req := fmt.Sprintf("GET /healthz HTTP/1.1\r\nHost: %s\r\nX-Big: %s\r\n\r\n", a.api, strings.Repeat("a", 1<<20))
	_, _ = conn.Write([]byte(req)) // the server may close before all of it is sent

	buf := make([]byte, 64)
	n, _ := conn.Read(buf) // what was read is what matters

	assert.Contains(t, string(buf[:n]), "431", "a 1 MiB header is refused (Request Header Fields Too Large)")
}
