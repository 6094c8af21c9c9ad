//go:build lab

package ha

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/hack/internal/labnet"
	"github.com/anvil-metal/anvil/hack/internal/labtest"
)

// Log messages of a replica (provider/internal/replica).
const (
	msgElected    = "elected leader"
	msgTermEnded  = "leadership ended"
	msgUnready    = "etcd does not answer: not serving machines until it does"
	msgReadyAgain = "etcd answers again: serving machines"
	msgPower      = "power action"
	msgBoot       = "boot"
)

// unreadyDHCP is a replica's count of DHCP requests its ProxyDHCP left unanswered while
// it may be stale.
func unreadyDHCP(m labtest.Metrics) float64 {
	return m.Sum("anvil_pxe_dhcp_ignored_total", "reason", "unready")
}

// probeAnswers broadcasts a BIOS PXE DISCOVER on the segment and returns who answered:
// the replicas (by index) whose ProxyDHCP offered, and the count of other answers (the
// site's DHCP server's).
func (c *chaosLab) probeAnswers(t labtest.T, mac net.HardwareAddr) (replicas []int, others int) {
	t.Helper()

	req, err := labtest.PXEDiscover(mac, nil)
	require.NoError(t, err)

	answers, err := c.segment.DHCPProbe(t.Context(), labnet.SiteVeth, req, 3*time.Second)
	require.NoError(t, err)

	for _, a := range answers {
		found := false

		for i := range c.s.Replicas {
			if a.From.Addr() == netip.MustParseAddr(labnet.ReplicaAddr(i)) {
				replicas, found = append(replicas, i), true
			}
		}

		if !found {
			others++
		}
	}

	return replicas, others
}

// bootQuery is a boot-script request's query, as a BIOS machine's iPXE sends it.
func bootQuery(uuid, mac string) string {
	return "/ipxe/boot.ipxe?uuid=" + uuid + "&mac=" + mac + "&arch=i386&platform=pcbios"
}

// waitReadyz waits until replica i's /readyz answers want, bounded by deadline, and
// returns when it first did.
func (c *chaosLab) waitReadyz(t labtest.T, i, want int, deadline time.Duration) time.Time {
	t.Helper()

	for end := time.Now().Add(deadline); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if c.ready(t.Context(), i) == want {
			return time.Now()
		}
	}

	t.Fatalf("replica r%d's /readyz did not answer %d within %s", i, want, deadline)

	return time.Time{}
}

// waitVIPMoved waits until the site's address is on one replica other than from.
func (c *chaosLab) waitVIPMoved(t labtest.T, from int, deadline time.Duration) (int, time.Time) {
	t.Helper()

	for end := time.Now().Add(deadline); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if h, err := c.s.VIPHolders(); err == nil && len(h) == 1 && h[0] != from {
			return h[0], time.Now()
		}
	}

	t.Fatalf("the site's address did not move off r%d within %s", from, deadline)

	return -1, time.Time{}
}

// followerPartitioned cuts a follower off from etcd (the one holding the site's address
// if a follower does): it must stop answering machines within a few seconds — /readyz,
// ProxyDHCP and iPXE — while the others go on, and answer again once the cut is lifted.
func (c *chaosLab) followerPartitioned(t labtest.T) {
	const section = "3. A follower cut off from etcd"

	c.waitWhole(t, "before the follower's partition")

	leader := waitLeader(t, c.s, -1)
	holder := vipHolder(t, c.s)

	f := holder
	if f == leader {
		f = (leader + 1) % len(c.s.Replicas)
	}

	mac := net.HardwareAddr{0x02, 0xc4, 0xa0, 0x00, 0x01, 0x01}
	uuid := "c4a00000-0000-4000-8000-000000000101"

	before, others := c.probeAnswers(t, mac)
	c.logf(t, "before: ProxyDHCP offers from replicas %v, %d other answer(s)", before, others)
	assert.Contains(t, before, f, "the follower offered before the partition")
	c.fig.Add(section, "DISCOVER before the cut: offers from replicas %v (+%d from the site's DHCP server)", before, others)

	code, _ := get(t.Context(), c.segment.HTTPClient(), c.url(f, bootQuery(uuid, mac.String())))
	assert.Equal(t, http.StatusOK, code, "the follower's boot script before the partition")

	unreadyBefore := unreadyDHCP(c.metrics(t.Context(), f))
	marks := c.markLogs()

	start := time.Now()
	lift := c.partition(t, f)

	unready := c.waitReadyz(t, f, http.StatusServiceUnavailable, time.Minute).Sub(start)
	c.logf(t, "follower r%d (leader r%d, address on r%d) cut off: /readyz 503 after %s", f, leader, holder, secs(unready))
	c.fig.Add(section, "follower r%d cut off (leader r%d, site address on r%d)", f, leader, holder)
	c.fig.Add(section, "  /readyz 503 after             %s", secs(unready))

	if l, ok := marks[f].First(msgUnready); ok {
		c.fig.Add(section, "  its log says unready after     %s", secs(l.At.Sub(start)))
	}

	if f == holder {
		to, at := c.waitVIPMoved(t, f, time.Minute)
		c.fig.Add(section, "  site address moved to r%d after %s", to, secs(at.Sub(start)))
	}

	during, others := c.probeAnswers(t, mac)
	m := c.metrics(t.Context(), f)
	ignored := unreadyDHCP(m) - unreadyBefore

	assert.NotContains(t, during, f, "the cut-off follower's ProxyDHCP offered")
	assert.Positive(t, ignored, "the cut-off follower's ProxyDHCP counted no request ignored as unready")
	assert.NotEmpty(t, during, "no ready replica offered")
	c.fig.Add(section, "  DISCOVER: offers from replicas %v (+%d); r%d left %.0f request(s) unanswered (anvil_pxe_dhcp_ignored_total{reason=\"unready\"})",
		during, others, f, ignored)

	code, body := get(t.Context(), c.segment.HTTPClient(), c.url(f, bootQuery(uuid, mac.String())))
	assert.Equal(t, http.StatusServiceUnavailable, code, "the cut-off follower's boot script: %s", body)
	c.fig.Add(section, "  iPXE boot script from it: %d (%s)", code, firstLine(body))

	for i := range c.s.Replicas {
		if i != f {
			assert.Equal(t, http.StatusOK, c.ready(t.Context(), i), "replica r%d, not cut off, is ready", i)
		}
	}

	now, _ := c.s.Leader(t.Context(), apiPort)
	assert.Equal(t, leader, now, "the leader changed while a follower was cut off")

	lifted := time.Now()

	lift()

	back := c.waitReadyz(t, f, http.StatusOK, time.Minute).Sub(lifted)
	c.fig.Add(section, "  ready again %s after the cut was lifted; leader unchanged: %v", secs(back), now == leader)
	c.logf(t, "follower r%d ready again %s after the cut was lifted", f, secs(back))

	c.waitWhole(t, "the follower's partition")
}

// leaderPartitioned cuts the leader off from etcd while it polls an accepted machine's
// BMC every 5 s: it must stop acting (no packet to any BMC) before another replica is
// elected, and no write of its may land later.
func (c *chaosLab) leaderPartitioned(t labtest.T) {
	const section = "2. The leader cut off from etcd (one accepted BIOS machine with an IPMI BMC, polled every 5 s)"

	m := c.biosVM(t)
	c.waitWhole(t, "before the leader's partition")

	leader := waitLeader(t, c.s, -1)
	marks := c.markLogs()
	sessions := count(c.s.BMCLog(m), sessionLine)

	packets := make([]int64, len(c.s.Replicas))
	for i := range c.s.Replicas {
		packets[i] = c.bmcPackets(t.Context(), i)
	}

	start := time.Now()
	lift := c.partition(t, leader)

	// Its BMC packets, sampled until another replica has led for 20 s.
	var lastPacket time.Time

	last := packets[leader]
	deposedAt := time.Time{}

	next, electedAt := -1, time.Time{}

	for end := time.Now().Add(3 * time.Minute); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if n := c.bmcPackets(t.Context(), leader); n != last {
			last, lastPacket = n, time.Now()
		}

		if deposedAt.IsZero() && c.metrics(t.Context(), leader).Sum("anvil_replica_leader") == 0 {
			deposedAt = time.Now()
		}

		if next < 0 {
			for i, mk := range marks {
				if l, ok := mk.First(msgElected); ok && i != leader && (next < 0 || l.At.Before(electedAt)) {
					next, electedAt = i, l.At
				}
			}
		}

		if next >= 0 && time.Since(electedAt) > 20*time.Second {
			break
		}
	}

	require.GreaterOrEqual(t, next, 0, "no replica was elected while the leader was cut off")

	c.fig.Add(section, "leader r%d cut off; r%d elected after %s", leader, next, secs(electedAt.Sub(start)))

	if l, ok := marks[leader].First(msgUnready); ok {
		c.fig.Add(section, "  old leader unready (its log)            after %s", secs(l.At.Sub(start)))
	}

	ended, endedOK := marks[leader].First(msgTermEnded)
	if endedOK {
		c.fig.Add(section, "  old leader's term ended (its log)       after %s: %s", secs(ended.At.Sub(start)), ended.Error)
		c.fig.Add(section, "  overlap: its term ended %s %s the new election", secs(absDur(ended.At.Sub(electedAt))), beforeAfter(ended.At, electedAt))
	}

	if !deposedAt.IsZero() {
		c.fig.Add(section, "  old leader's anvil_replica_leader 0     after %s", secs(deposedAt.Sub(start)))
	}

	if lastPacket.IsZero() {
		c.fig.Add(section, "  old leader's last BMC packet: none after the cut")
	} else {
		c.fig.Add(section, "  old leader's last BMC packet            after %s (%s %s the new election)",
			secs(lastPacket.Sub(start)), secs(absDur(lastPacket.Sub(electedAt))), beforeAfter(lastPacket, electedAt))
	}

	// The sampling's granularity: a packet counted at the sample after the election may
	// have been sent up to 200 ms before it.
	assert.True(t, lastPacket.IsZero() || lastPacket.Before(electedAt.Add(200*time.Millisecond)),
		"the old leader sent BMC packets after r%d was elected (last at %s, election at %s)", next, lastPacket.Format(time.RFC3339Nano), electedAt.Format(time.RFC3339Nano))

	var late []string

	for _, l := range marks[leader].All(msgPower) {
		if !l.At.Before(electedAt) {
			late = append(late, l.Raw)
		}
	}

	assert.Empty(t, late, "the old leader acted after the new election")

	newPackets := c.bmcPackets(t.Context(), next) - packets[next]
	c.fig.Add(section, "  new leader r%d's BMC packets meanwhile: %d; BMC sessions opened during the cut: %d; old leader's power actions after the election: %d",
		next, newPackets, count(c.s.BMCLog(m), sessionLine)-sessions, len(late))

	lift()
	c.waitWhole(t, "the leader's partition")

	fenced := c.metrics(t.Context(), leader).Sum("anvil_replica_fenced_writes_total")
	now, _ := c.s.Leader(t.Context(), apiPort)

	c.fig.Add(section, "  after the cut was lifted: the old leader's fenced writes (refused by etcd) %.0f; leader now r%d", fenced, now)
	c.logf(t, "leader r%d cut off: r%d elected after %s; old leader's fenced writes %.0f", leader, next, secs(electedAt.Sub(start)), fenced)

	if now != leader {
		// Led by another still: nothing of the old leader's since the election either.
		late = late[:0]

		for _, l := range marks[leader].All(msgPower) {
			if !l.At.Before(electedAt) {
				late = append(late, l.Raw)
			}
		}

		assert.Empty(t, late, "the old leader acted after the new election, the cut lifted")
	}
}

// sessionLine is what ipmi_sim logs as a LAN session opens (ipmisim.SessionLine).
const sessionLine = "Activate session: Session started"

func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}

	return d
}

func beforeAfter(a, b time.Time) string {
	if a.Before(b) {
		return "before"
	}

	return "after"
}

func firstLine(s string) string {
	for i, r := range s {
		if r == '\n' {
			return s[:i]
		}
	}

	return s
}

// count is how often what occurs in the file at path.
func count(path, what string) int { return strings.Count(readFile(path), what) }
