//go:build lab

package ha

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/hack/internal/labnet"
	"github.com/anvil-metal/anvil/hack/internal/labtest"
)

// seededMachines is how many machines etcdFaults records (from boot scripts alone) to
// compare before and after.
const seededMachines = 5

// seedMachines records machines by their boot-script requests through the site's
// address, as machines that PXE-boot are, and labels every other one; it returns their
// IDs.
func (c *chaosLab) seedMachines(t labtest.T) []string {
	t.Helper()

	client := c.segment.HTTPClient()
	vip := "http://" + net.JoinHostPort(labnet.VIP, strconv.Itoa(apiPort))

	var ids []string

	for n := range seededMachines {
		uuid := fmt.Sprintf("c4a00000-0000-4000-8000-0000000002%02d", n)
		mac := fmt.Sprintf("02:c4:a0:00:02:%02x", n)

		code, body := get(t.Context(), client, vip+bootQuery(uuid, mac))
		require.Equal(t, http.StatusOK, code, "boot script of seeded machine %d: %s", n, body)

		ids = append(ids, uuid)
	}

	for end := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
		out := c.ctlRetry(t, time.Minute, nil, "get", "machines")

		missing := 0

		for _, id := range ids {
			if !strings.Contains(out, id) {
				missing++
			}
		}

		if missing == 0 {
			break
		}

		require.True(t, time.Now().Before(end), "%d seeded machine(s) not recorded within a minute:\n%s", missing, out)
	}

	for n, id := range ids {
		if n%2 == 0 {
			c.ctlRetry(t, time.Minute, nil, "machine", "label", id, "chaos.example.com/kept=yes")
		}
	}

	return ids
}

// machinesYAML is every machine as anvilctl prints it, from a ready replica.
func (c *chaosLab) machinesYAML(t labtest.T) string {
	t.Helper()

	return c.ctlRetry(t, time.Minute, nil, "get", "machines", "-o", "yaml")
}

// etcdFaults: the raft leader killed, a member frozen for 10 s (the site keeps serving:
// the longest unready span of any replica is reported), and two of three members lost
// (every replica unready, the site's address gone) then brought back (every replica
// ready again, nothing lost: the machines as before).
func (c *chaosLab) etcdFaults(t labtest.T) {
	const section = "4. etcd faults (/readyz of every replica sampled every 100 ms)"

	c.waitWhole(t, "before the etcd faults")

	ids := c.seedMachines(t)
	before := c.machinesYAML(t)

	c.fig.Add(section, "%d machines recorded from boot scripts (every other one labelled) before the faults", len(ids))

	// The raft leader killed, then restarted after 20 s.
	raft, err := c.s.Etcd().Leader(t.Context())
	require.NoError(t, err)

	leader := waitLeader(t, c.s, -1)
	sampler := c.sampleReady(t.Context(), 100*time.Millisecond)

	require.NoError(t, c.s.Etcd().Kill(raft))
	time.Sleep(20 * time.Second)
	require.NoError(t, c.s.Etcd().Restart(t.Context(), raft))
	time.Sleep(5 * time.Second)

	c.reportSpans(t, section, fmt.Sprintf("raft leader (member %d) killed 20 s", raft), sampler.Stop(), leader)
	c.waitWhole(t, "the raft leader's kill")

	// A member frozen (SIGSTOP) for 10 s: the raft leader, whose loss stalls everyone.
	raft, err = c.s.Etcd().Leader(t.Context())
	require.NoError(t, err)

	leader = waitLeader(t, c.s, -1)
	sampler = c.sampleReady(t.Context(), 100*time.Millisecond)

	require.NoError(t, c.s.Etcd().Freeze(raft))
	time.Sleep(10 * time.Second)
	require.NoError(t, c.s.Etcd().Thaw(raft))
	time.Sleep(10 * time.Second)

	c.reportSpans(t, section, fmt.Sprintf("member %d (the raft leader) frozen 10 s", raft), sampler.Stop(), leader)
	c.waitWhole(t, "the frozen member")

	c.quorumLost(t, section)

	after := c.machinesYAML(t)
	assert.Equal(t, before, after, "the machines changed over the etcd faults")
	c.fig.Add(section, "machines before and after the faults (anvilctl get machines -o yaml): identical: %v", before == after)
}

// quorumLost kills two of the three members: every replica must go unready and the
// site's address go (no replica may answer), then, both restarted, every replica ready
// again.
func (c *chaosLab) quorumLost(t labtest.T, section string) {
	t.Helper()

	raft, err := c.s.Etcd().Leader(t.Context())
	require.NoError(t, err)

	lost := []int{(raft + 1) % 3, (raft + 2) % 3}
	leader := waitLeader(t, c.s, -1)
	sampler := c.sampleReady(t.Context(), 100*time.Millisecond)

	start := time.Now()

	for _, i := range lost {
		require.NoError(t, c.s.Etcd().Kill(i))
	}

	unreadyAt := make([]time.Duration, len(c.s.Replicas))

	for end := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		all := true

		for i := range c.s.Replicas {
			if unreadyAt[i] == 0 && c.ready(t.Context(), i) == http.StatusServiceUnavailable {
				unreadyAt[i] = time.Since(start)
			}

			all = all && unreadyAt[i] > 0
		}

		if all {
			break
		}

		require.True(t, time.Now().Before(end), "not every replica went unready within 2 min of quorum lost: %v", unreadyAt)
	}

	allUnready := time.Since(start)

	// keepalived takes the address off once its replica's check fails.
	var vipGone time.Duration

	for end := time.Now().Add(time.Minute); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if h, err := c.s.VIPHolders(); err == nil && len(h) == 0 {
			vipGone = time.Since(start)

			break
		}
	}

	assert.Positive(t, vipGone, "the site's address stayed on a replica with quorum lost")

	offers, others := c.probeAnswers(t, net.HardwareAddr{0x02, 0xc4, 0xa0, 0x00, 0x03, 0x01})
	assert.Empty(t, offers, "a replica's ProxyDHCP offered with quorum lost")

	time.Sleep(10 * time.Second)

	for i := range c.s.Replicas {
		assert.Equal(t, http.StatusServiceUnavailable, c.ready(t.Context(), i), "replica r%d ready with quorum lost", i)
	}

	restart := time.Now()

	for _, i := range lost {
		require.NoError(t, c.s.Etcd().Restart(t.Context(), i))
	}

	quorumBack := time.Since(restart)

	for i := range c.s.Replicas {
		c.waitReadyz(t, i, http.StatusOK, 2*time.Minute)
	}

	allReady := time.Since(restart)
	spans := sampler.Stop()
	_, worst := longest(spans)

	c.fig.Add(section, "members %v killed (quorum lost; site leader r%d before):", lost, leader)
	c.fig.Add(section, "  replicas unready after %s, all after %s; site address gone after %s; ProxyDHCP offers meanwhile: %d (+%d other)",
		fmtDurs(unreadyAt), secs(allUnready), secs(vipGone), len(offers), others)
	c.fig.Add(section, "  both restarted: quorum back after %s, every replica ready %s after the first restart; longest unready span %s",
		secs(quorumBack), secs(allReady), secs(worst))
	c.waitWhole(t, "quorum lost")

	now, _ := c.s.Leader(t.Context(), apiPort)
	c.fig.Add(section, "  leader after: r%d", now)
}

// reportSpans reports a fault's unready spans: the longest of any replica, and the
// longest during which none was ready; the site leader before and after.
func (c *chaosLab) reportSpans(t labtest.T, section, fault string, spans [][]interval, leader int) {
	t.Helper()

	who, worst := longest(spans)
	none := noneReady(spans)
	now, _ := c.s.Leader(t.Context(), apiPort)

	var per []string

	for i, ss := range spans {
		var total time.Duration
		for _, s := range ss {
			total += s.length()
		}

		per = append(per, fmt.Sprintf("r%d %d span(s) %s", i, len(ss), secs(total)))
	}

	where := "none"
	if who >= 0 {
		where = fmt.Sprintf("r%d", who)
	}

	c.fig.Add(section, "%s: longest unready span %s (%s); none ready at once for %s; per replica: %s; site leader r%d → r%d",
		fault, secs(worst), where, secs(none), strings.Join(per, ", "), leader, now)
	c.logf(t, "%s: longest unready span %s (%s), none ready for %s", fault, secs(worst), where, secs(none))
	assert.Zero(t, none, "%s: no replica was ready for %s", fault, secs(none))
}

func fmtDurs(ds []time.Duration) string {
	s := make([]string, len(ds))
	for i, d := range ds {
		s[i] = fmt.Sprintf("r%d %s", i, secs(d))
	}

	return strings.Join(s, ", ")
}
