//go:build lab

package hostile

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/anvil-metal/anvil/hack/internal/labtest"
	"github.com/anvil-metal/anvil/internal/netns"
)

// attacker is a host on the lab's provisioning network: the site namespace, a separate
// host on the bridge that the test's own lab created. Every socket of the attack is
// opened there, so its traffic stays inside the lab.
type attacker struct {
	ns string
	// provider is the provider's address on the bridge; api its HTTP/agent port.
	provider string
	api      string
}

// dial opens a TCP connection from the attacker's namespace.
func (a attacker) dial(ctx context.Context, addr string) (net.Conn, error) {
	return labtest.SegmentHost{NS: a.ns}.Dial(ctx, addr)
}

// udp opens a UDP socket in the attacker's namespace.
func (a attacker) udp() (*net.UDPConn, error) {
	var conn *net.UDPConn

	err := netns.Do(a.ns, func() error {
		var err error

		conn, err = net.ListenUDP("udp4", &net.UDPAddr{})

		return err
	})
	if err != nil {
		return nil, fmt.Errorf("error opening a UDP socket in %s: %w", a.ns, err)
	}

	return conn, nil
}

// httpClient is a plain HTTP client from the attacker's namespace, following no
// redirect.
func (a attacker) httpClient() *http.Client {
	return labtest.SegmentHost{NS: a.ns}.HTTPClient()
}

// get fetches path from the provider's HTTP API: status and at most 1 MiB of body.
func (a attacker) get(ctx context.Context, c *http.Client, path string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+a.api+path, nil)
	if err != nil {
		return 0, "", fmt.Errorf("error making the request for %q: %w", path, err)
	}

	// The path goes out exactly as written (escapes and dot segments kept): what an
	// attacker sends, not what a client library makes of it.
	req.URL.Opaque = "//" + a.api + path
	if i := strings.IndexByte(path, '?'); i >= 0 {
		req.URL.Opaque = "//" + a.api + path[:i]
		req.URL.RawQuery = path[i+1:]
	}

	resp, err := c.Do(req)
	if err != nil {
		return 0, "", fmt.Errorf("error fetching %q: %w", path, err)
	}

	defer resp.Body.Close()

	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20)) // a short body is still an answer

	return resp.StatusCode, string(b), nil
}

// agentConn is a gRPC connection to the agent API, over TLS as agents dial it; the
// attacker does not check the provider's certificate (it has no CA fingerprint).
func (a attacker) agentConn() (*grpc.ClientConn, error) {
	conn, err := grpc.NewClient("passthrough:///"+a.api,
		grpc.WithContextDialer(a.dial),
		grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{InsecureSkipVerify: true})), // the attacker trusts anything
	)
	if err != nil {
		return nil, fmt.Errorf("error making the agent API client: %w", err)
	}

	return conn, nil
}

// plainGRPC is a plaintext gRPC connection to the API port (Talos' event sink).
func (a attacker) plainGRPC() (*grpc.ClientConn, error) {
	return labtest.SegmentHost{NS: a.ns}.PlainGRPC(a.api) //nolint:wrapcheck // says what it was making
}

// closedWithin waits until the peer closes conn (a read returns an error other than a
// deadline of ours) or limit passes; it returns how long that took, and whether it did.
func closedWithin(conn net.Conn, start time.Time, limit time.Duration) (time.Duration, bool) {
	buf := make([]byte, 512)

	for time.Since(start) < limit {
		_ = conn.SetReadDeadline(time.Now().Add(time.Second)) // a closed conn fails the read below

		_, err := conn.Read(buf)
		if err == nil {
			continue // the server answered something (an error page): keep reading
		}

		if ne, ok := err.(net.Error); ok && ne.Timeout() { // net.Conn returns it unwrapped
			continue
		}

		return time.Since(start), true
	}

	return time.Since(start), false
}
