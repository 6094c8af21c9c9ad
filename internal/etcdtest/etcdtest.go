// Package etcdtest runs a real etcd cluster for tests and the lab: N members (3 unless
// told) of the etcd binary that make envtest-assets builds from its Go module into
// _out/tools/envtest/etcd ($ANVIL_ETCD_BIN names another), speaking TLS only, to clients
// and to each other, with certificates it makes for the cluster. Members can be killed,
// restarted, frozen and thawed, so that tests see what their code does when etcd fails.
package etcdtest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/anvil-metal/anvil/internal/freeport"
	"github.com/anvil-metal/anvil/internal/proc"
)

const (
	// readyTimeout bounds the wait for the cluster, or a restarted member, to be healthy.
	readyTimeout = 60 * time.Second
	// callTimeout bounds each status call to one member.
	callTimeout = 2 * time.Second
	dialTimeout = 5 * time.Second
)

// Config is the cluster to start.
type Config struct {
	// Members is how many members; 0 means 3.
	Members int
	// Dir holds the certificates (pki/), the members' data dirs (data-<i>) and their
	// logs (etcd-<i>.log). Start needs one; New makes a temporary one.
	Dir string
	// Namespaces, when set, runs member i in network namespace Namespaces[i]; Hosts must
	// then be set too. Such members listen on etcd's own ports, 2379 and 2380.
	Namespaces []string
	// Hosts are the members' IP addresses, 127.0.0.1 by default. Members outside
	// namespaces listen on ports free on 127.0.0.1 (internal/freeport).
	Hosts []string
	// Quota is --quota-backend-bytes; 0 leaves etcd's default.
	Quota int64
	// Binary is the etcd binary; by default $ANVIL_ETCD_BIN, else the repository's
	// _out/tools/envtest/etcd.
	Binary string
	// Dialer, when set, opens this process's connections to the members: the lab's sit
	// in namespaces this process is not in, reached by a dialer that opens its sockets
	// there.
	Dialer func(ctx context.Context, addr string) (net.Conn, error)
	// Daemon starts the members as daemons that outlive this process (the lab's, which
	// lab down stops by their data dirs under Dir).
	Daemon bool
}

// Cluster is a running etcd cluster. Its methods are safe to call from several goroutines.
type Cluster struct {
	binary  string
	daemon  bool
	dialer  func(ctx context.Context, addr string) (net.Conn, error)
	quota   int64
	cluster string // --initial-cluster
	pki     *pki

	mu      sync.Mutex
	members []*member
	admin   *clientv3.Client // for status calls; nil once stopped
	pids    []int            // every pid a member ever had
}

// repoRoot is the repository's root.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)

	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Binary is the etcd binary to run: name if set, else $ANVIL_ETCD_BIN, else the one
// make envtest-assets builds.
func Binary(name string) string {
	if name != "" {
		return name
	}

	if env := os.Getenv("ANVIL_ETCD_BIN"); env != "" {
		return env
	}

	return filepath.Join(repoRoot(), "_out", "tools", "envtest", "etcd")
}

// Start starts a new cluster in cfg.Dir and waits, bounded by ctx and 60 s, until every
// member answers and knows a leader and a read through the cluster succeeds. On error
// nothing it started runs any more; the members' logs stay in cfg.Dir.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	members, err := plan(cfg)
	if err != nil {
		return nil, err
	}

	for _, m := range members {
		if _, err := os.Stat(m.dataDir); err == nil {
			return nil, fmt.Errorf("%s holds a cluster already (%s)", cfg.Dir, m.dataDir)
		}
	}

	hosts := make([]string, len(members))
	for i, m := range members {
		hosts[i] = m.host
	}

	p, err := writePKI(filepath.Join(cfg.Dir, "pki"), hosts)
	if err != nil {
		return nil, err
	}

	for i, m := range members {
		m.tls = p.members[i]
	}

	c := &Cluster{binary: Binary(cfg.Binary), daemon: cfg.Daemon, dialer: cfg.Dialer, quota: cfg.Quota, cluster: initialCluster(members), pki: p, members: members}

	if err := c.start(ctx); err != nil {
		return nil, errors.Join(err, c.Stop())
	}

	return c, nil
}

// plan lays out the members of cfg: names, addresses, data dirs and logs.
func plan(cfg Config) ([]*member, error) {
	n := cfg.Members
	if n == 0 {
		n = 3
	}

	switch {
	case n < 0:
		return nil, fmt.Errorf("%d members", n)
	case cfg.Dir == "":
		return nil, errors.New("no directory for the cluster")
	case len(cfg.Hosts) != 0 && len(cfg.Hosts) != n:
		return nil, fmt.Errorf("%d hosts for %d members", len(cfg.Hosts), n)
	case len(cfg.Namespaces) != 0 && len(cfg.Namespaces) != n:
		return nil, fmt.Errorf("%d namespaces for %d members", len(cfg.Namespaces), n)
	case len(cfg.Namespaces) != 0 && len(cfg.Hosts) == 0:
		return nil, errors.New("members in namespaces need their hosts")
	}

	members := make([]*member, n)

	for i := range members {
		m := &member{
			name:       memberName(i),
			host:       "127.0.0.1",
			clientPort: 2379,
			peerPort:   2380,
			dataDir:    filepath.Join(cfg.Dir, fmt.Sprintf("data-%d", i)),
			log:        logPath(cfg.Dir, i),
		}

		if len(cfg.Hosts) != 0 {
			m.host = cfg.Hosts[i]
		}

		if len(cfg.Namespaces) != 0 {
			m.ns = cfg.Namespaces[i]
		} else {
			var err error

			if m.clientPort, err = freeport.TCP(); err != nil {
				return nil, err
			}

			if m.peerPort, err = freeport.TCP(); err != nil {
				return nil, err
			}
		}

		members[i] = m
	}

	return members, nil
}

// start starts every member and waits until the cluster is healthy.
func (c *Cluster) start(ctx context.Context) error {
	tlsConfig, err := c.ClientTLSConfig()
	if err != nil {
		return err
	}

	c.admin, err = clientv3.New(clientv3.Config{
		Endpoints:   c.Endpoints(),
		DialTimeout: dialTimeout,
		DialOptions: c.dialOptions(),
		TLS:         tlsConfig,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return fmt.Errorf("error making a client of the cluster: %w", err)
	}

	c.mu.Lock()

	for _, m := range c.members {
		if err := c.startMember(m, "new"); err != nil {
			c.mu.Unlock()

			return err
		}
	}

	c.mu.Unlock()

	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()

	for i := range c.members {
		if err := c.waitMember(ctx, i); err != nil {
			return err
		}
	}

	for {
		gctx, gcancel := context.WithTimeout(ctx, callTimeout)
		_, err := c.admin.Get(gctx, "etcdtest-ready")

		gcancel()

		if err == nil {
			return nil
		}

		select {
		case <-ctx.Done():
			return fmt.Errorf("the cluster answered no read within %s: %w", readyTimeout, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// startMember starts m; c.mu is held.
func (c *Cluster) startMember(m *member, state string) error {
	if err := m.start(c.binary, m.args(c.cluster, state, c.quota), c.daemon); err != nil {
		return err
	}

	c.pids = append(c.pids, m.child.Pid())

	return nil
}

// waitMember waits until member i answers a status call and knows a leader, and records
// its member ID. It gives up early should the member exit.
func (c *Cluster) waitMember(ctx context.Context, i int) error {
	c.mu.Lock()
	m := c.members[i]
	child := m.child
	c.mu.Unlock()

	if child == nil {
		return fmt.Errorf("%s does not run", m.name)
	}

	var last error

	for {
		if exited, err := child.Exited(); exited {
			return fmt.Errorf("%s exited (%v); see %s", m.name, err, m.log)
		}

		sctx, cancel := context.WithTimeout(ctx, callTimeout)
		st, err := c.admin.Status(sctx, m.clientURL())

		cancel()

		switch {
		case err != nil:
			last = err
		case st.Leader == 0:
			last = fmt.Errorf("%s knows no leader yet", m.name)
		default:
			c.mu.Lock()
			m.id = st.Header.MemberId
			c.mu.Unlock()

			return nil
		}

		select {
		case <-ctx.Done():
			return fmt.Errorf("%s was not healthy in time (%w): %w", m.name, ctx.Err(), last)
		case <-child.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Endpoints are the members' client URLs (https://host:port), in member order.
func (c *Cluster) Endpoints() []string {
	eps := make([]string, len(c.members))
	for i, m := range c.members {
		eps[i] = m.clientURL()
	}

	return eps
}

// Endpoint is member i's client URL.
func (c *Cluster) Endpoint(i int) string { return c.members[i].clientURL() }

// Log is the path of member i's log (of its current run; earlier runs' are <log>.1…).
func (c *Cluster) Log(i int) string { return c.members[i].log }

// TLS are the files a client presents and trusts.
func (c *Cluster) TLS() TLSFiles { return c.pki.client }

// ClientTLSConfig is the TLS configuration of a client of the cluster.
func (c *Cluster) ClientTLSConfig() (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(c.pki.client.Cert, c.pki.client.Key)
	if err != nil {
		return nil, fmt.Errorf("error loading the client certificate: %w", err)
	}

	caPEM, err := os.ReadFile(c.pki.client.CA)
	if err != nil {
		return nil, fmt.Errorf("error reading the CA: %w", err)
	}

	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("no certificate in %s", c.pki.client.CA)
	}

	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// Client is a client of every member; ctx bounds its life (it is closed when ctx ends),
// and the caller closes it.
func (c *Cluster) Client(ctx context.Context) (*clientv3.Client, error) {
	tlsConfig, err := c.ClientTLSConfig()
	if err != nil {
		return nil, err
	}

	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   c.Endpoints(),
		DialTimeout: dialTimeout,
		DialOptions: c.dialOptions(),
		TLS:         tlsConfig,
		Context:     ctx,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("error making a client of the cluster: %w", err)
	}

	return cli, nil
}

// Stop stops every member (SIGTERM, SIGKILL after 5 s) and waits until they have exited.
// It may be called more than once. It fails should a member's process still run after.
//
// The followers stop first and the leader last: a leader stopping hands its leadership
// to a follower, and should that follower be stopping too, the leader waits for it until
// it is killed.
func (c *Cluster) Stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	leader, err := c.Leader(ctx)

	cancel()

	if err != nil {
		leader = -1 // none to spare: stop all at once
	}

	c.mu.Lock()
	defer c.mu.Unlock()

	if c.admin != nil {
		c.admin.Close()
		c.admin = nil
	}

	var wg sync.WaitGroup

	for i, m := range c.members {
		if i != leader {
			wg.Go(func() { m.stop(stopGrace) })
		}
	}

	wg.Wait()

	if leader >= 0 {
		c.members[leader].stop(stopGrace)
	}

	var alive []int

	for _, pid := range c.pids {
		if proc.Alive(pid) {
			alive = append(alive, pid)
		}
	}

	if len(alive) != 0 {
		return fmt.Errorf("etcd processes %v still run", alive)
	}

	return nil
}

// dialOptions are the clients' gRPC dial options: the Dialer, when one was given.
func (c *Cluster) dialOptions() []grpc.DialOption {
	if c.dialer == nil {
		return nil
	}

	return []grpc.DialOption{grpc.WithContextDialer(c.dialer)}
}
