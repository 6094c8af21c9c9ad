// Package omni is the provider's side of Omni (DESIGN.md, "Who decides what"): the
// connection to Omni's API as a static infra provider, the provider's status and
// health there, and the join config machines boot with to reach Omni over SideroLink.
package omni

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"sync"

	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/omni/client/pkg/client"
	omniclient "github.com/siderolabs/omni/client/pkg/client/omni"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// DefaultProviderID is the infra provider ID unless --id says otherwise, as the
// established provider names it.
const DefaultProviderID = "bare-metal"

// Options configure the connection.
type Options struct {
	// Endpoint is Omni's API, https://host:port.
	Endpoint string
	// ServiceAccountKey is the infra provider's service account key (secret: never
	// logged).
	ServiceAccountKey string
	// ProviderID is the infra provider's ID in Omni.
	ProviderID string
	// Name, Description and Version are how Omni shows the provider.
	Name, Description, Version string
	// InsecureSkipTLSVerify skips verifying Omni's certificate.
	InsecureSkipTLSVerify bool
	// CACertFile is a PEM file of CA certificates trusted for Omni's API besides the
	// system's.
	CACertFile string
	// ProviderSocket is the provider's adapter API (omnilink): Omni's join config is
	// handed to it there. Empty: not handed on (tests).
	ProviderSocket string
	// State, when set, is used instead of connecting (tests: an in-memory state holding
	// Omni's resource types).
	State  state.State
	Logger *zap.Logger
}

// Connection is the provider's link to Omni.
type Connection struct {
	opts   Options
	st     state.State
	client *client.Client

	mu       sync.RWMutex
	joinArgs []string
	// joinConfig is the join config's documents, served to Talos in Omni mode.
	joinConfig string
	// joinChanged wakes the hand-over to the provider.
	joinChanged chan struct{}
}

// Dial connects to Omni (lazily: the first call connects) as the infra provider.
func Dial(opts Options) (*Connection, error) {
	if opts.ProviderID == "" {
		opts.ProviderID = DefaultProviderID
	}

	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}

	c := &Connection{opts: opts, st: opts.State, joinChanged: make(chan struct{}, 1)}

	if c.st != nil {
		return c, nil
	}

	if opts.ServiceAccountKey == "" {
		return nil, errors.New("no Omni service account key: set OMNI_SERVICE_ACCOUNT_KEY or --omni-service-account-key-file")
	}

	cl, err := newClient(opts)
	if err != nil {
		return nil, err
	}

	c.client = cl
	c.st = cl.Omni().State()

	return c, nil
}

// Close closes the connection.
func (c *Connection) Close() error {
	if c.client == nil {
		return nil
	}

	return c.client.Close()
}

// Endpoint is Omni's API endpoint, as the provider names its owner.
func (c *Connection) Endpoint() string { return c.opts.Endpoint }

// JoinArgs returns the kernel args that make a machine join Omni over SideroLink
// (siderolink.api=, talos.events.sink=, talos.logging.kernel=), and false until Omni's
// join config has been read.
func (c *Connection) JoinArgs() ([]string, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()

	return slices.Clone(c.joinArgs), c.joinArgs != nil
}

// newClient builds the Omni API client. Omni's client builds its TLS config from the
// system's roots alone; to trust a CA of the user's too, the connection is made TLS by a
// dialer of our own and the client is told the transport is plain.
func newClient(opts Options) (*client.Client, error) {
	u, err := url.Parse(opts.Endpoint)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("Omni endpoint %q is not a URL like https://omni.example:443", opts.Endpoint) //nolint:staticcheck // Omni is a name
	}

	clientOpts := []client.Option{
		client.WithServiceAccount(opts.ServiceAccountKey),
		client.WithInsecureSkipTLSVerify(opts.InsecureSkipTLSVerify),
		client.WithOmniClientOptions(omniclient.WithProviderID(opts.ProviderID)),
	}

	if opts.CACertFile == "" || u.Scheme != "https" {
		cl, err := client.New(opts.Endpoint, clientOpts...)
		if err != nil {
			return nil, fmt.Errorf("error creating the Omni client: %w", err)
		}

		return cl, nil
	}

	roots, err := rootsWith(opts.CACertFile)
	if err != nil {
		return nil, err
	}

	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "443")
	}

	tlsConfig := &tls.Config{
		RootCAs: roots, ServerName: u.Hostname(), NextProtos: []string{"h2"}, MinVersion: tls.VersionTLS12,
		InsecureSkipVerify: opts.InsecureSkipTLSVerify, //nolint:gosec // only when the user asks (--insecure-skip-tls-verify)
	}

	dial := func(ctx context.Context, addr string) (net.Conn, error) {
		var d net.Dialer

		raw, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}

		conn := tls.Client(raw, tlsConfig)
		if err := conn.HandshakeContext(ctx); err != nil {
			raw.Close()

			return nil, fmt.Errorf("TLS handshake with Omni at %s: %w", addr, err)
		}

		return conn, nil
	}

	clientOpts = append(clientOpts, client.WithGrpcOpts(grpc.WithContextDialer(dial)))

	cl, err := client.New("grpc://"+host, clientOpts...)
	if err != nil {
		return nil, fmt.Errorf("error creating the Omni client: %w", err)
	}

	return cl, nil
}

// rootsWith is the system's trusted roots and the certificates of file.
func rootsWith(file string) (*x509.CertPool, error) {
	pemData, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("error reading the Omni CA certificate: %w", err)
	}

	roots, err := x509.SystemCertPool()
	if err != nil {
		roots = x509.NewCertPool()
	}

	if !roots.AppendCertsFromPEM(pemData) {
		return nil, fmt.Errorf("%s holds no PEM certificate", file)
	}

	return roots, nil
}
