package labtest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/anvil-metal/anvil/internal/netns"
)

// SegmentHost is another host on a lab's provisioning network: a namespace on the lab's
// bridge (the site's), which the test's own lab created. Its sockets are opened there, so
// its traffic stays inside the lab; the provider sees it as a stranger's.
type SegmentHost struct {
	NS string
}

// Dial opens a TCP connection from the host.
func (h SegmentHost) Dial(ctx context.Context, addr string) (net.Conn, error) {
	var conn net.Conn

	err := netns.Do(h.NS, func() error {
		var err error

		d := net.Dialer{Timeout: 5 * time.Second}
		conn, err = d.DialContext(ctx, "tcp", addr)

		return err
	})
	if err != nil {
		return nil, fmt.Errorf("error dialing %s from %s: %w", addr, h.NS, err)
	}

	return conn, nil
}

// HTTPClient is a plain HTTP client of the host; it follows no redirect, so what the
// provider answers is what the test sees.
func (h SegmentHost) HTTPClient() *http.Client {
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
				return h.Dial(ctx, addr)
			},
			MaxIdleConnsPerHost: 8,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}
