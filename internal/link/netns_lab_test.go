//go:build lab

package link

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jsimonetti/rtnetlink/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	"golang.org/x/sys/unix"
)

const (
	childEnv    = "ANVIL_LINK_TEST_CHILD"
	resolvEnv   = "ANVIL_LINK_TEST_RESOLV"
	agentMAC    = "02:a0:00:00:01:01"
	servedLink  = "veth-agent"
	silentLink  = "veth-silent"
	leasedAddr  = "10.201.0.50/24"
	gateway     = "10.201.0.1"
	nameserver  = "10.201.0.53"
	leaseHostID = "anvil-node-1"
)

// TestLabDHCPInNamespace builds two network namespaces joined by veth pairs,
// runs dnsmasq as the DHCP server in one and this package, in a child
// process, in the other: `ip netns exec` moves the whole child, threads and
// sysfs view alike, which a goroutine-level setns cannot.
func TestLabDHCPInNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces")
	}

	for _, bin := range []string{"ip", "dnsmasq", "unshare"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("needs %s (apt-get install iproute2 dnsmasq-base util-linux)", bin)
		}
	}

	var rnd [3]byte
	_, _ = rand.Read(rnd[:])
	agentNS := "anvil-link-" + hex.EncodeToString(rnd[:])
	serverNS := agentNS + "-dhcp"

	run := func(args ...string) {
		t.Helper()

		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()

		out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput()
		require.NoError(t, err, "%s: %s", strings.Join(args, " "), out)
	}

	t.Cleanup(func() {
		for _, ns := range []string{agentNS, serverNS} {
			_ = exec.Command("ip", "netns", "del", ns).Run()
		}
	})

	run("ip", "netns", "add", agentNS)
	run("ip", "netns", "add", serverNS)
	run("ip", "link", "add", servedLink, "address", agentMAC, "netns", agentNS, "type", "veth", "peer", "name", "veth-srv", "netns", serverNS)
	run("ip", "link", "add", silentLink, "netns", agentNS, "type", "veth", "peer", "name", "veth-nobody", "netns", serverNS)
	run("ip", "-n", serverNS, "addr", "add", gateway+"/24", "dev", "veth-srv")
	run("ip", "-n", serverNS, "link", "set", "veth-srv", "up")
	run("ip", "-n", serverNS, "link", "set", "veth-nobody", "up")

	dir := t.TempDir()

	dnsmasqCtx, stopDnsmasq := context.WithCancel(context.Background())
	dnsmasq := exec.CommandContext(dnsmasqCtx, "ip", "netns", "exec", serverNS, "dnsmasq",
		"--no-daemon", "--conf-file=/dev/null", "--port=0", "--user=root", "--log-dhcp",
		"--interface=veth-srv", "--bind-interfaces",
		"--dhcp-range=10.201.0.100,10.201.0.200,255.255.255.0,5m",
		"--dhcp-option=option:router,"+gateway,
		"--dhcp-option=option:dns-server,"+nameserver,
		"--dhcp-option=option:domain-name,lab.anvil",
		"--dhcp-host="+agentMAC+","+strings.TrimSuffix(leasedAddr, "/24")+","+leaseHostID,
		"--dhcp-leasefile="+filepath.Join(dir, "leases"),
		"--pid-file="+filepath.Join(dir, "dnsmasq.pid"))

	var dnsmasqLog strings.Builder
	dnsmasq.Stdout, dnsmasq.Stderr = &dnsmasqLog, &dnsmasqLog
	require.NoError(t, dnsmasq.Start())

	t.Cleanup(func() {
		stopDnsmasq()
		_ = dnsmasq.Wait()
		// `ip netns exec` execs dnsmasq in place, so the kill reached it;
		// the pid file covers a dnsmasq that forked regardless.
		if b, err := os.ReadFile(filepath.Join(dir, "dnsmasq.pid")); err == nil {
			var pid int
			if _, err := fmt.Sscan(string(b), &pid); err == nil && pid > 1 {
				_ = unix.Kill(pid, unix.SIGKILL)
			}
		}

		if t.Failed() {
			t.Logf("dnsmasq:\n%s", dnsmasqLog.String())
		}
	})

	resolv := filepath.Join(dir, "resolv.conf")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// unshare --uts: the child may set its hostname without touching the host's.
	child := exec.CommandContext(ctx, "unshare", "--uts", "ip", "netns", "exec", agentNS,
		os.Args[0], "-test.run=^TestLabChildInNamespace$", "-test.v", "-test.count=1")
	child.Env = append(os.Environ(), childEnv+"=1", resolvEnv+"="+resolv)

	start := time.Now()
	out, err := child.CombinedOutput()
	t.Logf("child (%v):\n%s", time.Since(start).Round(time.Millisecond), out)
	require.NoError(t, err)
	require.Contains(t, string(out), "--- PASS: TestLabChildInNamespace")

	// Seen from outside too: the address outlives the child (its context
	// ended; a lease is only withdrawn when lost).
	show, err := exec.Command("ip", "-n", agentNS, "-4", "-o", "addr", "show", "dev", servedLink).CombinedOutput()
	require.NoError(t, err)
	assert.Contains(t, string(show), leasedAddr)
}

// TestLabChildInNamespace is the child half of TestLabDHCPInNamespace.
func TestLabChildInNamespace(t *testing.T) {
	if os.Getenv(childEnv) == "" {
		t.Skip("runs only as TestLabDHCPInNamespace's child")
	}

	require.NoError(t, unix.Sethostname([]byte("localhost")))

	ctx, cancel := context.WithCancel(context.Background())

	m, err := Start(ctx, Options{
		Logger:     zaptest.NewLogger(t),
		Select:     func(name string) bool { return name == servedLink || name == silentLink },
		ResolvConf: os.Getenv(resolvEnv),
		Attempt:    3 * time.Second,
		Backoff:    200 * time.Millisecond,
	})
	require.NoError(t, err)

	stopped := false
	stop := func() {
		if stopped {
			return
		}

		stopped = true
		cancel()

		done := make(chan struct{})
		go func() { m.Wait(); close(done) }()

		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("link goroutines did not stop within 10s")
		}
	}
	t.Cleanup(stop)

	start := time.Now()
	sum, err := m.WaitAddress(ctx, 20*time.Second)
	require.NoError(t, err)
	t.Logf("first address after %v", time.Since(start).Round(time.Millisecond))

	js, err := json.MarshalIndent(sum, "", "  ")
	require.NoError(t, err)
	t.Logf("summary: %s", js)

	served, ok := sum.Link(servedLink)
	require.True(t, ok)
	assert.Contains(t, served.Addresses, netip.MustParsePrefix(leasedAddr))
	assert.Equal(t, []netip.Addr{netip.MustParseAddr(gateway)}, served.Gateways)
	assert.Equal(t, []netip.Addr{netip.MustParseAddr(nameserver)}, served.DNS)
	assert.Equal(t, netip.MustParseAddr(gateway), served.DHCPServer)
	assert.WithinDuration(t, time.Now().Add(5*time.Minute), served.Expires, 30*time.Second)

	// Check the kernel's own view over rtnetlink.
	conn, err := rtnetlink.Dial(nil)
	require.NoError(t, err)
	defer conn.Close()

	ifc, err := net.InterfaceByName(servedLink)
	require.NoError(t, err)
	assert.NotZero(t, ifc.Flags&net.FlagUp, "link is up")

	routes, err := conn.Route.List()
	require.NoError(t, err)

	foundDefault := false

	for _, r := range routes {
		if r.Family == unix.AF_INET && r.DstLength == 0 && r.Table == unix.RT_TABLE_MAIN &&
			r.Attributes.OutIface == uint32(ifc.Index) && r.Attributes.Gateway.Equal(net.ParseIP(gateway)) {
			foundDefault = true
		}
	}

	assert.True(t, foundDefault, "default route via %s on %s", gateway, servedLink)

	// WaitAddress may be woken by the kernel's address (or the other link's retries)
	// before the lease's DNS and hostname are written: they follow within moments.
	require.Eventually(t, func() bool {
		resolv, err := os.ReadFile(os.Getenv(resolvEnv))

		return err == nil && strings.Contains(string(resolv), "nameserver "+nameserver+"\n") &&
			strings.Contains(string(resolv), "search lab.anvil\n")
	}, 10*time.Second, 10*time.Millisecond, "resolv.conf from the lease")

	require.Eventually(t, func() bool {
		host, err := os.Hostname()

		return err == nil && host == leaseHostID
	}, 10*time.Second, 10*time.Millisecond, "hostname from the lease")

	// The link nobody serves keeps failing, says why, and keeps retrying.
	require.Eventually(t, func() bool {
		l, ok := m.Summary().Link(silentLink)

		return ok && l.Err != "" && len(l.Addresses) == 0
	}, 15*time.Second, 100*time.Millisecond)
	silent, _ := m.Summary().Link(silentLink)
	t.Logf("silent link: %s", silent.Err)

	// Stopping is bounded even mid-exchange.
	stopAt := time.Now()
	stop()
	t.Logf("stopped in %v", time.Since(stopAt).Round(time.Millisecond))
}
