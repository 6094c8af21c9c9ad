package omnilab

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"

	"github.com/anvil-metal/anvil/hack/internal/labpki"
	"github.com/anvil-metal/anvil/internal/netns"
)

// Dialer dials from inside network namespace ns: the lab's addresses are reachable only
// from the lab's namespaces, not from the host a test runs on. The socket is made on a
// thread that entered ns and stays in ns after; "" dials from the caller's namespace.
// It suits net/http's Transport.DialContext, and gRPC through
//
//	grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
//		return omnilab.Dialer(ns)(ctx, "tcp", addr)
//	})
func Dialer(ns string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer

		if ns == "" {
			return d.DialContext(ctx, network, addr)
		}

		var conn net.Conn

		err := netns.Do(ns, func() error {
			var err error

			conn, err = d.DialContext(ctx, network, addr)

			return err
		})
		if err != nil {
			return nil, fmt.Errorf("error dialing %s from network namespace %s: %w", addr, ns, err)
		}

		return conn, nil
	}
}

// HTTPClient is an HTTP client that dials from network namespace ns and trusts only the
// CA in caFile: how a test reaches Omni's API over HTTPS, verified.
func HTTPClient(ns, caFile string) (*http.Client, error) {
	pool, err := labpki.Pool(caFile)
	if err != nil {
		return nil, err
	}

	return &http.Client{Transport: &http.Transport{
		DialContext:     Dialer(ns),
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		// Omni's API is gRPC and HTTP on one port; either protocol serves /healthz.
		ForceAttemptHTTP2: true,
	}}, nil
}
