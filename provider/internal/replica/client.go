package replica

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// ClientConfig is how a replica reaches etcd.
type ClientConfig struct {
	// Endpoints are the members' client URLs (https://host:2379).
	Endpoints []string
	// CA, Cert and Key are the files of the CA that signed the members' certificates and
	// of this replica's client certificate: etcd is only ever spoken to over mutual TLS,
	// for the state holds every machine's secrets (encrypted) and the election.
	CA, Cert, Key string
	// DialTimeout bounds the first connection.
	DialTimeout time.Duration
}

// Dial connects to etcd. The client keeps going to other members when one fails; a
// call's own deadline bounds it.
func Dial(cfg ClientConfig, logger *zap.Logger) (*clientv3.Client, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("no etcd endpoints given (--etcd-endpoints)")
	}

	for _, ep := range cfg.Endpoints {
		if !strings.HasPrefix(ep, "https://") {
			return nil, fmt.Errorf("etcd endpoint %q is not https://: the state is only spoken over TLS", ep)
		}
	}

	tlsConfig, err := clientTLS(cfg)
	if err != nil {
		return nil, err
	}

	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 5 * time.Second
	}

	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   cfg.Endpoints,
		TLS:         tlsConfig,
		DialTimeout: cfg.DialTimeout,
		// A member that stops answering is noticed within seconds (etcd's least
		// keepalive time is 10 s), and the balancer moves on.
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 3 * time.Second,
		// Refuse members of an etcd older than this client's (3.6): a mixed cluster in
		// the middle of a downgrade is not one to keep a site's state on. (Watches
		// leave a member cut off from its raft leader: state-etcd asks them with
		// WithRequireLeader.)
		RejectOldCluster: true,
		Logger:           logger,
	})
	if err != nil {
		return nil, fmt.Errorf("error connecting to etcd at %s: %w", strings.Join(cfg.Endpoints, ","), err)
	}

	return cli, nil
}

func clientTLS(cfg ClientConfig) (*tls.Config, error) {
	if cfg.CA == "" || cfg.Cert == "" || cfg.Key == "" {
		return nil, errors.New("etcd needs --etcd-ca, --etcd-cert and --etcd-key: the state is only spoken over mutual TLS")
	}

	caPEM, err := os.ReadFile(cfg.CA)
	if err != nil {
		return nil, fmt.Errorf("error reading the etcd CA: %w", err)
	}

	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("the etcd CA %s holds no PEM certificate", cfg.CA)
	}

	cert, err := tls.LoadX509KeyPair(cfg.Cert, cfg.Key)
	if err != nil {
		return nil, fmt.Errorf("error reading the etcd client certificate: %w", err)
	}

	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}
