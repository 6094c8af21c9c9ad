package anvilctl

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"

	"github.com/cosi-project/runtime/api/v1alpha1"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/cosi-project/runtime/pkg/state/protobuf/client"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	controlv1 "github.com/anvil-metal/anvil/api/control/v1"
)

// Message size limits, matching the server's: a request carries at most a 1 MiB config.
const (
	maxSendMsgSize = 2 << 20
	maxRecvMsgSize = 4 << 20
)

// app holds the global flags and the connection, opened on first use.
type app struct {
	endpoint string
	caCert   string
	cert     string
	key      string

	conn *grpc.ClientConn
}

func (a *app) connect() (*grpc.ClientConn, error) {
	if a.conn != nil {
		return a.conn, nil
	}

	target, creds, err := a.target()
	if err != nil {
		return nil, err
	}

	a.conn, err = grpc.NewClient(target,
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(maxSendMsgSize), grpc.MaxCallRecvMsgSize(maxRecvMsgSize)),
	)
	if err != nil {
		return nil, fmt.Errorf("error connecting to %s: %w", a.endpoint, err)
	}

	return a.conn, nil
}

// target maps the endpoint to a gRPC target and its credentials: a Unix socket is
// guarded by its file mode, TCP is always TLS.
func (a *app) target() (string, credentials.TransportCredentials, error) {
	switch {
	case strings.HasPrefix(a.endpoint, "unix://"):
		return a.endpoint, insecure.NewCredentials(), nil
	case strings.HasPrefix(a.endpoint, "/"):
		return "unix://" + a.endpoint, insecure.NewCredentials(), nil
	case strings.HasPrefix(a.endpoint, "tcp://"):
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}

		if a.caCert != "" {
			pem, err := os.ReadFile(a.caCert)
			if err != nil {
				return "", nil, fmt.Errorf("error reading the CA certificate: %w", err)
			}

			cfg.RootCAs = x509.NewCertPool()
			if !cfg.RootCAs.AppendCertsFromPEM(pem) {
				return "", nil, fmt.Errorf("no PEM certificate in %s", a.caCert)
			}
		}

		if a.cert != "" || a.key != "" {
			pair, err := tls.LoadX509KeyPair(a.cert, a.key)
			if err != nil {
				return "", nil, fmt.Errorf("error loading the client certificate: %w", err)
			}

			cfg.Certificates = []tls.Certificate{pair}
		}

		return "dns:///" + strings.TrimPrefix(a.endpoint, "tcp://"), credentials.NewTLS(cfg), nil
	default:
		return "", nil, fmt.Errorf("endpoint %q is neither unix:///path nor tcp://host:port", a.endpoint)
	}
}

func (a *app) state() (state.State, error) {
	conn, err := a.connect()
	if err != nil {
		return nil, err
	}

	return state.WrapCore(client.NewAdapter(v1alpha1.NewStateClient(conn))), nil
}

func (a *app) transitions() (controlv1.TransitionServiceClient, error) {
	conn, err := a.connect()
	if err != nil {
		return nil, err
	}

	return controlv1.NewTransitionServiceClient(conn), nil
}

func (a *app) close() error {
	if a.conn == nil {
		return nil
	}

	return a.conn.Close()
}
