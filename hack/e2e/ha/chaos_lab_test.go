//go:build lab

package ha

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/hack/internal/lab"
	"github.com/anvil-metal/anvil/hack/internal/labnet"
	"github.com/anvil-metal/anvil/hack/internal/labtest"
	"github.com/anvil-metal/anvil/hack/internal/machine"
	"github.com/anvil-metal/anvil/internal/etcdtest"
	"github.com/anvil-metal/anvil/internal/proc"
)

// The site's faults, measured rather than asserted on time: each scenario reports its
// figures (the test's log and _out/ha-chaos.txt) and asserts only what must hold — a
// replica that may be stale answers nothing, a deposed leader acts no more, nothing is
// lost — with deadlines generous enough for a shared two-core host.
const (
	// chaosReport is the figures' file, under the repository's root.
	chaosReport = "_out/ha-chaos.txt"
	// leaderTTL is the replicas' leader lease (the provider's default).
	leaderTTL = 10 * time.Second
	// wholeDeadline bounds the wait for the site to be whole again after a fault.
	wholeDeadline = 3 * time.Minute
	// partTable is the nftables table that cuts a replica off from etcd, bmcTable the one
	// that counts each replica's packets to the simulated BMCs.
	partTable = "anvil_chaos_part"
	bmcTable  = "anvil_chaos_bmc"
)

// TestSiteChaos is the site of three replicas under faults (HA.md 1.4, 1.5 and risks
// 4-6): takeover times after a graceful stop, a SIGKILL and a host lost (20 times each);
// the leader cut off from etcd (it stops acting before another leads: no BMC packet
// from it after the new election); a follower cut off (it stops answering machines:
// /readyz, ProxyDHCP, iPXE); etcd's raft leader killed, a member frozen, quorum lost and
// back (nothing lost); a deallocated machine power-cycled while the replica holding the
// site's address is cut off (it is wiped, never sent to its disk); each firmware
// (SeaBIOS+iPXE, OVMF+iPXE, OVMF's own PXE) booting through three ProxyDHCP offers; and
// the leader SIGKILLed once an agent has its kexec order (Talos by that kexec, once, and
// no BMC action).
// make chaos runs it (about 40 min under TCG).
func TestSiteChaos(tt *testing.T) {
	if os.Getenv("ANVIL_CHAOS_FULL") != "1" {
		tt.Skip("the site's chaos scenarios take about 40 minutes: set ANVIL_CHAOS_FULL=1 (make chaos)")
	}

	t := labtest.Recording(tt)

	labtest.RequireHost(t)

	for _, tool := range []string{"ipmi_sim", "keepalived", "curl", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (make setup installs it)", tool)
		}
	}

	if _, err := os.Stat(etcdtest.Binary("")); err != nil {
		t.Skipf("needs etcd (make envtest-assets builds it): %v", err)
	}

	c := newChaosLab(t)

	t.Run("takeover", c.takeovers)
	t.Run("follower-partitioned", c.followerPartitioned)
	t.Run("etcd-faults", c.etcdFaults)
	t.Run("leader-partitioned", c.leaderPartitioned)
	t.Run("deallocated-reboot-partitioned", c.deallocatedRebootPartitioned)
	t.Run("proxy-offers", c.proxyOffers)
	t.Run("leader-killed-mid-kexec", c.leaderKilledMidKexec)
}

// chaosLab is the site the scenarios share, one after another.
type chaosLab struct {
	s    *lab.State
	bins labtest.Binaries
	root string
	fig  *labtest.Figures
	// api reaches the replicas' HTTP ports from the lab's bridge namespace; segment is
	// a host on the provisioning network (the site DHCP server's namespace).
	api     *http.Client
	segment labtest.SegmentHost
	start   time.Time

	// vm is the BIOS machine with a simulated IPMI BMC, accepted and wiped (biosVM).
	vm *machine.Machine
	// vmRegistered is how long vm took from power-on to its agent's registration.
	vmRegistered time.Duration
}

func newChaosLab(t labtest.T) *chaosLab {
	t.Helper()

	root := labtest.RepoRoot(t)
	bins := labtest.BuildBinaries(t, root, t.TempDir())
	dir, prefix := labtest.NewLab(t, "anvc", nil)

	cfg := bins.Config(dir, prefix)
	cfg.Replicas, cfg.APIPort = 3, apiPort

	c := &chaosLab{root: root, bins: bins, fig: &labtest.Figures{}, start: time.Now()}

	// Registered after NewLab's teardown, so it runs first: the figures of whatever ran.
	t.Cleanup(func() { c.fig.Write(t, root, "The site of replicas under faults", chaosReport) })

	s, err := lab.Up(t.Context(), cfg)
	require.NoError(t, err)

	c.s = s
	c.segment = labtest.SegmentHost{NS: s.SiteNS}
	bridge := labtest.SegmentHost{NS: s.ProviderNS}
	c.api = &http.Client{
		Timeout: 2 * time.Second,
		Transport: &http.Transport{
			DialContext:         func(ctx context.Context, _, addr string) (net.Conn, error) { return bridge.Dial(ctx, addr) },
			MaxIdleConnsPerHost: 4,
		},
	}

	c.waitWhole(t, "the site came up")
	c.countBMCPackets(t)

	return c
}

// logf reports a figure in the test's log, with the time since the lab came up.
func (c *chaosLab) logf(t labtest.T, format string, args ...any) {
	t.Helper()
	t.Logf("%s (t=%.0fs)", fmt.Sprintf(format, args...), time.Since(c.start).Seconds())
}

// url is replica i's HTTP API at path.
func (c *chaosLab) url(i int, path string) string {
	return "http://" + net.JoinHostPort(c.s.Replicas[i].Addr, strconv.Itoa(apiPort)) + path
}

// get is the status and body of GET url with client (status 0: no answer).
func get(ctx context.Context, client *http.Client, url string) (int, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err.Error()
	}

	resp, err := client.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()

	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))

	return resp.StatusCode, string(b)
}

// ready is replica i's /readyz status (0: it does not answer).
func (c *chaosLab) ready(ctx context.Context, i int) int {
	code, _ := get(ctx, c.api, c.url(i, "/readyz"))

	return code
}

// metrics are replica i's metrics ("" when it does not answer).
func (c *chaosLab) metrics(ctx context.Context, i int) labtest.Metrics {
	m, err := labtest.ScrapeMetrics(ctx, c.api, c.url(i, "/metrics"))
	if err != nil {
		return ""
	}

	return m
}

// ctl runs anvilctl against replica i's control socket.
func (c *chaosLab) ctl(i int) func(args ...string) (string, error) {
	return labtest.Anvilctl(c.bins.Anvilctl, c.s.ReplicaControlSocket(i))
}

// readyReplica is a running replica, none of not, whose /readyz answers 200; -1 when
// none does.
func (c *chaosLab) readyReplica(ctx context.Context, not ...int) int {
	for i, r := range c.s.Replicas {
		if !slices.Contains(not, i) && proc.Alive(r.PID) && c.ready(ctx, i) == http.StatusOK {
			return i
		}
	}

	return -1
}

// ctlRetry runs anvilctl on a ready replica, none of not, until it succeeds (a transition
// may fail while the site changes leader); bounded by deadline.
func (c *chaosLab) ctlRetry(t labtest.T, deadline time.Duration, not []int, args ...string) string {
	t.Helper()

	var out string

	var err error

	for end := time.Now().Add(deadline); time.Now().Before(end); time.Sleep(time.Second) {
		i := c.readyReplica(t.Context(), not...)
		if i < 0 {
			err = fmt.Errorf("no ready replica (other than %v)", not)

			continue
		}

		if out, err = c.ctl(i)(args...); err == nil {
			return out
		}
	}

	require.NoError(t, err, "anvilctl %s within %s: %s", strings.Join(args, " "), deadline, out)

	return out
}

// whole says what keeps the site from being whole: every replica running and ready, a
// leader, the site's address on exactly one replica, every etcd member running and one
// raft leader they agree on ("" when whole).
func (c *chaosLab) whole(ctx context.Context) string {
	for i, r := range c.s.Replicas {
		if !proc.Alive(r.PID) {
			return fmt.Sprintf("replica r%d does not run", i)
		}

		if code := c.ready(ctx, i); code != http.StatusOK {
			return fmt.Sprintf("replica r%d's /readyz answers %d", i, code)
		}

		if c.s.Etcd().Pid(i) == 0 {
			return fmt.Sprintf("etcd member %d does not run", i)
		}
	}

	if _, err := c.s.Etcd().Leader(ctx); err != nil {
		return fmt.Sprintf("etcd: %v", err)
	}

	if l, err := c.s.Leader(ctx, apiPort); err != nil || l < 0 {
		return fmt.Sprintf("no replica leads (%v)", err)
	}

	holders, err := c.s.VIPHolders()
	if err != nil || len(holders) != 1 {
		return fmt.Sprintf("the site's address is on replicas %v (%v)", holders, err)
	}

	return ""
}

// waitWhole waits until the site is whole again and returns how long that took.
func (c *chaosLab) waitWhole(t labtest.T, after string) time.Duration {
	t.Helper()

	start := time.Now()

	var why string

	for time.Since(start) < wholeDeadline {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		why = c.whole(ctx)

		cancel()

		if why == "" {
			return time.Since(start)
		}

		time.Sleep(250 * time.Millisecond)
	}

	t.Fatalf("%s: the site is not whole within %s: %s", after, wholeDeadline, why)

	return 0
}

// markLogs marks every replica's log.
func (c *chaosLab) markLogs() []labtest.LogMark {
	marks := make([]labtest.LogMark, len(c.s.Replicas))
	for i := range c.s.Replicas {
		marks[i] = labtest.MarkLog(c.s.ReplicaLog(i))
	}

	return marks
}

// elected waits, bounded by deadline, until a replica other than not logs "elected
// leader" after its mark, and returns it with the line's time.
func elected(t labtest.T, marks []labtest.LogMark, not int, deadline time.Duration) (int, time.Time) {
	t.Helper()

	for end := time.Now().Add(deadline); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		best, at := -1, time.Time{}

		for i, m := range marks {
			if i == not {
				continue
			}

			if l, ok := m.First("elected leader"); ok && (best < 0 || l.At.Before(at)) {
				best, at = i, l.At
			}
		}

		if best >= 0 {
			return best, at
		}
	}

	t.Fatalf("no replica other than r%d was elected within %s", not, deadline)

	return -1, time.Time{}
}

// partition cuts replica i off from etcd: its namespace drops every TCP packet to an
// etcd client port, every member's (its own beside it included, over loopback, and any
// loopback address). It checks that no member can be reached from the namespace any
// more, and returns the function that lifts the cut.
func (c *chaosLab) partition(t labtest.T, i int) func() {
	t.Helper()

	members := make([]string, 0, len(c.s.Replicas))
	for j := range c.s.Replicas {
		members = append(members, labnet.ReplicaAddr(j))
	}

	lift := labtest.NFT(t, c.s.Replicas[i].NS, partTable, fmt.Sprintf(`
  chain out {
    type filter hook output priority 0; policy accept;
    ip daddr { %s, 127.0.0.0/8 } tcp dport 2379 counter drop
  }`, strings.Join(members, ", ")))
	t.Cleanup(lift)

	for _, addr := range append(members, "127.0.0.1") {
		host := labtest.SegmentHost{NS: c.s.Replicas[i].NS}

		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		conn, err := host.Dial(ctx, net.JoinHostPort(addr, "2379"))

		cancel()

		if err == nil {
			conn.Close()
		}

		require.Error(t, err, "replica r%d still reaches %s:2379 through the partition", i, addr)
	}

	return lift
}

// countBMCPackets counts each replica's UDP packets to the simulated BMCs (on the lab's
// bridge address), for as long as the test runs.
func (c *chaosLab) countBMCPackets(t labtest.T) {
	t.Helper()

	for i, r := range c.s.Replicas {
		if _, err := labtest.NFTCounter(t.Context(), r.NS, bmcTable, "bmc"); err == nil {
			continue // counting already
		}

		del := labtest.NFT(t, r.NS, bmcTable, fmt.Sprintf(`
  counter bmc {}
  chain out {
    type filter hook output priority 0; policy accept;
    ip daddr %s udp dport %d-%d counter name bmc
  }`, labnet.ProviderAddr, lab.BMCLANPortBase, lab.BMCLANPortBase+99))
		t.Cleanup(del)

		c.logf(t, "counting replica r%d's packets to the BMCs", i)
	}
}

// bmcPackets is replica i's count of packets to the simulated BMCs (-1: not counted).
func (c *chaosLab) bmcPackets(ctx context.Context, i int) int64 {
	n, err := labtest.NFTCounter(ctx, c.s.Replicas[i].NS, bmcTable, "bmc")
	if err != nil {
		return -1
	}

	return n
}

// durations summarises ds: min, median, max.
func durations(ds []time.Duration) (lo, median, hi time.Duration) {
	if len(ds) == 0 {
		return 0, 0, 0
	}

	s := slices.Clone(ds)
	slices.Sort(s)

	median = s[len(s)/2]
	if len(s)%2 == 0 {
		median = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}

	return s[0], median, s[len(s)-1]
}

func secs(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }
