// Package controlclient dials the provider's control API, for its clients: anvilctl and
// the Cluster API manager. A Unix socket is guarded by its file mode; TCP is always TLS,
// with the provider's admin client certificate.
package controlclient

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/cosi-project/runtime/api/v1alpha1"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/cosi-project/runtime/pkg/state/protobuf/client"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	controlv1 "github.com/anvil-metal/anvil/api/control/v1"
)

// Message size limits, matching the server's: a request carries at most a 1 MiB config.
const (
	maxSendMsgSize = 2 << 20
	maxRecvMsgSize = 4 << 20
)

// Options say where the control API is and how to trust it.
type Options struct {
	// Endpoint is unix:///path/to/control.sock (or the bare path) or tcp://host:port.
	Endpoint string
	// CACert is a PEM file of the CA that signed a tcp:// endpoint's certificate
	// (empty: the system roots).
	CACert string
	// Cert and Key are the client certificate and key (PEM) for a tcp:// endpoint.
	Cert, Key string
}

// Dial returns a connection to the control API; gRPC connects on first use.
func Dial(opts Options) (*grpc.ClientConn, error) {
	target, creds, err := Target(opts)
	if err != nil {
		return nil, err
	}

	conn, err := grpc.NewClient(target,
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(maxSendMsgSize), grpc.MaxCallRecvMsgSize(maxRecvMsgSize)),
		// A long-lived client (the Cluster API manager) must find a restarted provider
		// within seconds, not after gRPC's default two-minute backoff.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: time.Second, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 10 * time.Second},
			MinConnectTimeout: 10 * time.Second,
		}),
		// An idle watch over a half-open TCP connection would wait for TCP to give up
		// (minutes): pings find it within 40 s. The server allows one per 10 s.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second, PermitWithoutStream: true}),
	)
	if err != nil {
		return nil, fmt.Errorf("error connecting to %s: %w", opts.Endpoint, err)
	}

	return conn, nil
}

// Target maps the endpoint to a gRPC target and its credentials.
func Target(opts Options) (string, credentials.TransportCredentials, error) {
	switch {
	case strings.HasPrefix(opts.Endpoint, "unix://"):
		return opts.Endpoint, insecure.NewCredentials(), nil
	case strings.HasPrefix(opts.Endpoint, "/"):
		return "unix://" + opts.Endpoint, insecure.NewCredentials(), nil
	case strings.HasPrefix(opts.Endpoint, "tcp://"):
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}

		if opts.CACert != "" {
			pem, err := os.ReadFile(opts.CACert)
			if err != nil {
				return "", nil, fmt.Errorf("error reading the CA certificate: %w", err)
			}

			cfg.RootCAs = x509.NewCertPool()
			if !cfg.RootCAs.AppendCertsFromPEM(pem) {
				return "", nil, fmt.Errorf("no PEM certificate in %s", opts.CACert)
			}
		}

		if opts.Cert != "" || opts.Key != "" {
			pair, err := tls.LoadX509KeyPair(opts.Cert, opts.Key)
			if err != nil {
				return "", nil, fmt.Errorf("error loading the client certificate: %w", err)
			}

			cfg.Certificates = []tls.Certificate{pair}
		}

		return "dns:///" + strings.TrimPrefix(opts.Endpoint, "tcp://"), credentials.NewTLS(cfg), nil
	default:
		return "", nil, fmt.Errorf("endpoint %q is neither unix:///path nor tcp://host:port", opts.Endpoint)
	}
}

// State is the COSI state API over conn: read and watch every resource.
func State(conn *grpc.ClientConn) state.State {
	return state.WrapCore(client.NewAdapter(v1alpha1.NewStateClient(conn)))
}

// Transitions is the transition service over conn.
func Transitions(conn *grpc.ClientConn) controlv1.TransitionServiceClient {
	return controlv1.NewTransitionServiceClient(conn)
}
