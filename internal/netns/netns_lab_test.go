//go:build lab

package netns

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// requireRoot skips where namespaces cannot be made.
func requireRoot(t *testing.T) {
	t.Helper()

	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}

	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs ip (iproute2)")
	}
}

// names gives the test namespaces of its own, deleted when it ends, pass or fail, and
// checked gone.
func names(t *testing.T, tags ...string) []string {
	t.Helper()

	var ns []string
	for _, tag := range tags {
		ns = append(ns, fmt.Sprintf("anvnt%d-%s", os.Getpid()%100000, tag))
	}

	t.Cleanup(func() {
		for _, n := range ns {
			assert.NoError(t, Delete(n))
		}

		listed, err := List()
		assert.NoError(t, err)

		for _, n := range ns {
			assert.NotContains(t, listed, n, "namespace left behind")
		}
	})

	return ns
}

func TestLabNamespaceLife(t *testing.T) {
	requireRoot(t)

	n := names(t, "life")[0]

	require.False(t, Exists(n))
	require.NoError(t, Create(n))
	require.True(t, Exists(n))
	require.NoError(t, Create(n), "creating again keeps it")

	listed, err := List()
	require.NoError(t, err)
	assert.Contains(t, listed, n)

	// iproute2 sees it: the same namespaces, by the same names.
	out, err := exec.Command("ip", "netns", "list").CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), n)

	out, err = exec.Command("ip", "-n", n, "link", "show").CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "lo:")
	assert.NotContains(t, string(out), "eth", "a namespace of its own, with only its loopback")

	// A process started in it is listed, and only there.
	cmd := Command(context.WithoutCancel(t.Context()), n, "sleep", "300")
	require.NoError(t, cmd.Start())

	t.Cleanup(func() {
		cmd.Process.Kill() //nolint:errcheck // ends the test's own sleep
		cmd.Wait()         //nolint:errcheck // killed
	})

	require.Eventually(t, func() bool {
		pids, err := PIDs(n)

		return err == nil && len(pids) == 1 && pids[0] == cmd.Process.Pid
	}, 10*time.Second, 20*time.Millisecond, "ip netns exec execs the program in the namespace")

	require.NoError(t, cmd.Process.Kill())
	cmd.Wait() //nolint:errcheck // killed

	pids, err := PIDs(n)
	require.NoError(t, err)
	assert.Empty(t, pids)

	require.NoError(t, Delete(n))
	assert.False(t, Exists(n))
	require.NoError(t, Delete(n), "deleting again is harmless")

	pids, err = PIDs(n)
	require.NoError(t, err)
	assert.Empty(t, pids, "no namespace, no processes")
	assert.Error(t, Do(n, func() error { return nil }))
}

func TestLabCreateOverStaleFile(t *testing.T) {
	requireRoot(t)

	n := names(t, "stale")[0]

	// What a crash between the file and the mount leaves.
	require.NoError(t, os.MkdirAll(RunDir, 0o755))
	require.NoError(t, os.WriteFile(Path(n), nil, 0o644))
	require.False(t, Exists(n))

	require.NoError(t, Create(n))
	require.True(t, Exists(n))
}

func TestLabLinks(t *testing.T) {
	requireRoot(t)

	ns := names(t, "a", "b")
	a, b := ns[0], ns[1]

	for _, n := range ns {
		require.NoError(t, Create(n))
	}

	la, err := OpenLinks(a)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, la.Close()) })

	lb, err := OpenLinks(b)
	require.NoError(t, err)
	t.Cleanup(func() { _ = lb.Close() }) // closed below already when the test gets there

	// a: bridge br0 with a veth into b and a tap; b: the veth's peer.
	for range 2 { // the second round finds everything there
		require.NoError(t, la.AddBridge("br0"))
		require.NoError(t, la.AddVeth("veth-b", "veth0", b))
		require.NoError(t, la.AddTap("tap0"))
		require.NoError(t, la.SetMaster("veth-b", "br0"))
		require.NoError(t, la.SetMaster("tap0", "br0"))

		for _, l := range []string{"lo", "br0", "veth-b", "tap0"} {
			require.NoError(t, la.SetUp(l))
		}

		require.NoError(t, lb.SetUp("lo"))
		require.NoError(t, lb.SetUp("veth0"))
		require.NoError(t, la.AddAddr("br0", netip.MustParsePrefix("10.99.0.1/24")))
		require.NoError(t, la.AddAddr("br0", netip.MustParsePrefix("fd99::1/64")))
		require.NoError(t, lb.AddAddr("veth0", netip.MustParsePrefix("10.99.0.2/24")))
	}

	namesA, err := la.Names()
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"lo", "br0", "veth-b", "tap0"}, namesA)

	namesB, err := lb.Names()
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"lo", "veth0"}, namesB, "the peer is in the other namespace")

	addrs, err := la.Addrs("br0")
	require.NoError(t, err)
	assert.Contains(t, addrs, netip.MustParsePrefix("10.99.0.1/24"))
	assert.Contains(t, addrs, netip.MustParsePrefix("fd99::1/64"))

	// What iproute2 reads back: the bridge without multicast snooping, the tap a tap
	// without packet information, the IPv6 address without DAD.
	out, err := exec.Command("ip", "-n", a, "-d", "link", "show", "br0").CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "mcast_snooping 0")

	out, err = exec.Command("ip", "-n", a, "-d", "link", "show", "tap0").CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "tun type tap pi off")
	assert.Contains(t, string(out), "master br0")

	out, err = exec.Command("ip", "-n", a, "addr", "show", "br0").CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "fd99::1/64 scope global nodad")

	// Across the veth and the bridge: a TCP round trip from b to a, each end's socket
	// opened inside its namespace.
	var l net.Listener

	require.NoError(t, Do(a, func() error {
		var err error
		l, err = net.Listen("tcp", "10.99.0.1:0")

		return err
	}))

	t.Cleanup(func() { l.Close() })

	served := make(chan error, 1)

	go func() {
		c, err := l.Accept()
		if err != nil {
			served <- err

			return
		}

		defer c.Close()

		_, err = io.WriteString(c, "from a")
		served <- err
	}()

	var got []byte

	require.NoError(t, Do(b, func() error {
		d := net.Dialer{Timeout: 10 * time.Second}

		c, err := d.Dial("tcp", l.Addr().String())
		if err != nil {
			return err
		}

		defer c.Close()

		got, err = io.ReadAll(c)

		return err
	}))
	require.NoError(t, <-served)
	assert.Equal(t, "from a", string(got))

	// Neither namespace is the caller's: the veth and the tap are not here.
	host, err := net.Interfaces()
	require.NoError(t, err)

	for _, ifc := range host {
		assert.NotContains(t, []string{"br0", "veth-b", "veth0", "tap0"}, ifc.Name)
	}

	// /proc/thread-self/net inside Do is the namespace's.
	var dev []byte

	require.NoError(t, Do(b, func() error {
		var err error
		dev, err = os.ReadFile("/proc/thread-self/net/dev")

		return err
	}))
	assert.Contains(t, string(dev), "veth0:")

	// Deleting a link, then a namespace, takes its links along.
	require.NoError(t, la.Delete("tap0"))
	require.NoError(t, la.Delete("tap0"), "a missing link is deleted")

	ok, err := la.Exists("tap0")
	require.NoError(t, err)
	assert.False(t, ok)

	require.ErrorContains(t, la.SetUp("tap0"), "no link tap0")
	require.Error(t, la.AddAddr("br0", netip.Prefix{}))
	require.ErrorContains(t, la.AddVeth("x", "y", "anvnt-nonexistent"), "no network namespace")

	// The rtnetlink socket in b holds it: close it, as a lab does before its Down.
	require.NoError(t, lb.Close())
	require.NoError(t, Delete(b))

	require.Eventually(t, func() bool {
		ok, err := la.Exists("veth-b")

		return err == nil && !ok
	}, 10*time.Second, 20*time.Millisecond, "the veth goes with its peer's namespace")
}

func TestLabDoReportsFnError(t *testing.T) {
	requireRoot(t)

	n := names(t, "do")[0]
	require.NoError(t, Create(n))

	boom := errors.New("boom")
	assert.ErrorIs(t, Do(n, func() error { return boom }), boom)

	// No thread of the process stays in the namespace: every one is back in its own.
	var want unix.Stat_t
	require.NoError(t, unix.Stat(Path(n), &want))

	for range 20 {
		require.NoError(t, Do(n, func() error { return nil }))
	}

	threads, err := filepath.Glob("/proc/self/task/*/ns/net")
	require.NoError(t, err)
	require.NotEmpty(t, threads)

	for _, th := range threads {
		var st unix.Stat_t
		if unix.Stat(th, &st) == nil {
			assert.False(t, st.Dev == want.Dev && st.Ino == want.Ino, "%s is in the namespace", th)
		}
	}
}

func TestLabCommandSeesTheNamespaceSysfs(t *testing.T) {
	requireRoot(t)

	n := names(t, "sys")[0]
	require.NoError(t, Create(n))

	links, err := OpenLinks(n)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, links.Close()) })

	require.NoError(t, links.AddBridge("br-sys"))

	out, err := Command(t.Context(), n, "ls", "/sys/class/net").CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.ElementsMatch(t, []string{"br-sys", "lo"}, strings.Fields(string(out)))

	_, err = os.Stat(filepath.Join("/sys/class/net", "br-sys"))
	assert.Error(t, err, "not in the host's")
}
