package fleetbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/anvil-metal/anvil/internal/etcdtest"
	"github.com/anvil-metal/anvil/internal/proc"
)

// The states a benchmark run can put the provider on.
const (
	StateBolt = "bbolt"
	StateEtcd = "etcd"
)

// etcdPrefix is the site's prefix: the provider's --etcd-prefix.
const etcdPrefix = "/anvil/bench"

// etcdMembers is the cluster's size: the smallest that survives a member lost, as a site
// runs it.
const etcdMembers = 3

// etcdSite is the etcd cluster a provider on etcd keeps its state on, and the bench's own
// client of it: the revision at phase boundaries, the members' status and /metrics, and a
// watch that tallies every key written under the site's prefix.
type etcdSite struct {
	cluster   *etcdtest.Cluster
	cli       *clientv3.Client
	metrics   *http.Client
	tally     *tally
	stopWatch context.CancelFunc
	watchDone chan struct{}
}

// startEtcd starts the cluster in dir (TLS to clients and peers, etcdtest's flags: among
// them revision auto-compaction keeping 1,000 revisions) and the tally's watch.
func startEtcd(ctx context.Context, dir, binary string) (*etcdSite, error) {
	cluster, err := etcdtest.Start(ctx, etcdtest.Config{Members: etcdMembers, Dir: dir, Binary: binary})
	if err != nil {
		return nil, fmt.Errorf("error starting etcd: %w", err)
	}

	s := &etcdSite{cluster: cluster, tally: newTally(), watchDone: make(chan struct{})}

	tlsConfig, err := cluster.ClientTLSConfig()
	if err == nil {
		s.metrics = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig}}
		s.cli, err = cluster.Client(context.WithoutCancel(ctx))
	}

	if err != nil {
		return nil, errors.Join(err, cluster.Stop())
	}

	watchCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	s.stopWatch = stop

	go func() {
		defer close(s.watchDone)

		s.tally.watch(watchCtx, s.cli, etcdPrefix+"/")
	}()

	return s, nil
}

// stop ends the watch, the client and the cluster.
func (s *etcdSite) stop() error {
	s.stopWatch()
	<-s.watchDone

	return errors.Join(s.cli.Close(), s.cluster.Stop())
}

// providerArgs make a provider a replica of the site.
func (s *etcdSite) providerArgs() []string {
	files := s.cluster.TLS()

	return []string{
		"--state", StateEtcd, "--etcd-endpoints", strings.Join(s.cluster.Endpoints(), ","),
		"--etcd-ca", files.CA, "--etcd-cert", files.Cert, "--etcd-key", files.Key,
		"--etcd-prefix", etcdPrefix, "--replica-name", "r0",
	}
}

// revision is the cluster's revision now: every write transaction so far.
func (s *etcdSite) revision(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()

	resp, err := s.cli.Get(ctx, etcdPrefix+"/provider-key", clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("error reading etcd's revision: %w", err)
	}

	return resp.Header.Revision, nil
}

// dbSize is the largest backend size and size in use among the members.
func (s *etcdSite) dbSize(ctx context.Context) (size, inUse int64, err error) {
	for _, ep := range s.cluster.Endpoints() {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		st, serr := s.cli.Status(sctx, ep)

		cancel()

		if serr != nil {
			return 0, 0, fmt.Errorf("error reading the status of %s: %w", ep, serr)
		}

		size, inUse = max(size, st.DbSize), max(inUse, st.DbSizeInUse)
	}

	return size, inUse, nil
}

// liveSize compacts the whole history away (to the current revision) and reads what the
// backend then holds in use: the live data alone. It ends a run: the history is gone.
func (s *etcdSite) liveSize(ctx context.Context) (int64, error) {
	rev, err := s.revision(ctx)
	if err != nil {
		return 0, err
	}

	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()

	if _, err = s.cli.Compact(cctx, rev, clientv3.WithCompactPhysical()); err != nil && !errors.Is(err, rpctypes.ErrCompacted) {
		return 0, fmt.Errorf("error compacting etcd to revision %d: %w", rev, err)
	}

	// The size in use is updated as the backend commits, every 100 ms.
	time.Sleep(time.Second)

	_, inUse, err := s.dbSize(ctx)

	return inUse, err
}

// cpu is the members' CPU time so far, summed.
func (s *etcdSite) cpu() time.Duration {
	var sum time.Duration

	for i := range etcdMembers {
		if pid := s.cluster.Pid(i); pid > 0 {
			if t, err := proc.CPUTime(pid); err == nil {
				sum += t
			}
		}
	}

	return sum
}

// etcdCounters are what the members applied and served (their /metrics): every member
// applies every write, so member 0's puts, deletes, transactions, bytes put and WAL
// bytes are the cluster's (the WAL bytes: each member's); a read is served by the member
// the client asked, so the ranges are the members' sum.
type etcdCounters struct {
	Puts, Deletes, Txns, Ranges float64
	// PutBytes are the keys' and values' bytes put (etcd_debugging_mvcc_total_put_size_in_bytes);
	// WALBytes what a member wrote to its write-ahead log.
	PutBytes, WALBytes float64
}

func (c etcdCounters) sub(o etcdCounters) etcdCounters {
	return etcdCounters{
		Puts: c.Puts - o.Puts, Deletes: c.Deletes - o.Deletes, Txns: c.Txns - o.Txns, Ranges: c.Ranges - o.Ranges,
		PutBytes: c.PutBytes - o.PutBytes, WALBytes: c.WALBytes - o.WALBytes,
	}
}

// counters reads the members' /metrics on their client URLs (client TLS).
func (s *etcdSite) counters(ctx context.Context) (etcdCounters, error) {
	var c etcdCounters

	for i := range etcdMembers {
		var ranges float64

		want := map[string]*float64{"etcd_mvcc_range_total": &ranges}
		if i == 0 {
			want["etcd_mvcc_put_total"] = &c.Puts
			want["etcd_mvcc_delete_total"] = &c.Deletes
			want["etcd_mvcc_txn_total"] = &c.Txns
			want["etcd_debugging_mvcc_total_put_size_in_bytes"] = &c.PutBytes
			want["etcd_disk_wal_write_bytes_total"] = &c.WALBytes
		}

		if err := s.memberMetrics(ctx, i, want); err != nil {
			return etcdCounters{}, err
		}

		c.Ranges += ranges
	}

	return c, nil
}

// memberMetrics reads member i's /metrics into want.
func (s *etcdSite) memberMetrics(ctx context.Context, i int, want map[string]*float64) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.cluster.Endpoint(i)+"/metrics", nil)
	if err != nil {
		return fmt.Errorf("error asking etcd for its metrics: %w", err)
	}

	resp, err := s.metrics.Do(req)
	if err != nil {
		return fmt.Errorf("error reading etcd's metrics: %w", err)
	}
	defer resp.Body.Close()

	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("etcd's metrics: %s", resp.Status)
	}

	return parseMetrics(resp.Body, want)
}

// parseMetrics sets each named unlabelled sample of a Prometheus text page.
func parseMetrics(page io.Reader, want map[string]*float64) error {
	parser := expfmt.NewTextParser(model.UTF8Validation)

	families, err := parser.TextToMetricFamilies(page)
	if err != nil {
		return fmt.Errorf("error reading metrics: %w", err)
	}

	for name, p := range want {
		for _, m := range families[name].GetMetric() {
			if len(m.GetLabel()) == 0 {
				*p = m.GetCounter().GetValue() + m.GetGauge().GetValue() + m.GetUntyped().GetValue()
			}
		}
	}

	return nil
}
