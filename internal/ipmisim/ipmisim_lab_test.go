//go:build lab

package ipmisim

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/internal/freeport"
	"github.com/anvil-metal/anvil/internal/netns"
	"github.com/anvil-metal/anvil/internal/proc"
)

const (
	labUser     = "admin"
	labPassword = "lab-pw"
)

func requireTools(t *testing.T) {
	t.Helper()

	for _, tool := range []string{"ipmi_sim", "ipmitool"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (Debian openipmi, ipmitool)", tool)
		}
	}
}

// loopbackConfig is a BMC on loopback ports of its own, under a directory of the test.
func loopbackConfig(t *testing.T) Config {
	t.Helper()

	lan, err := freeport.UDP()
	require.NoError(t, err)

	serial, err := freeport.TCP()
	require.NoError(t, err)

	return Config{
		Name: "lab-test", Dir: filepath.Join(t.TempDir(), "bmc"), GUID: "a123456789abcdefa123456789abcdef",
		LANAddr: "127.0.0.1", LANPort: lan, SerialPort: serial,
		Users: []User{
			{ID: 1, Name: "", Password: "", Privilege: "user"},
			{ID: 2, Enabled: true, Name: labUser, Password: labPassword, Privilege: "admin"},
		},
	}
}

// start runs ipmi_sim for c, stopped when the test ends, pass or fail, with its log
// printed on failure.
func start(t *testing.T, c Config) *Sim {
	t.Helper()

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	s, err := Start(ctx, c, "")
	require.NoError(t, err)

	t.Cleanup(func() {
		s.Stop()

		if t.Failed() {
			if b, err := os.ReadFile(c.Log()); err == nil {
				t.Logf("ipmi_sim log:\n%s", b)
			}
		}
	})

	return s
}

func clientOf(s *Sim) *Client {
	return &Client{Addr: s.Config.LANAddr, Port: s.Config.LANPort, User: labUser, Password: labPassword}
}

func TestLabStartCommandPower(t *testing.T) {
	requireTools(t)

	c := loopbackConfig(t)
	c.StartCommand = []string{"sleep", "600"}

	s := start(t, c)
	cl := clientOf(s)
	ctx := t.Context()

	on, err := cl.PowerState(ctx)
	require.NoError(t, err)
	assert.False(t, on, "startnow false: off at start")
	assert.Zero(t, c.MachinePID())

	require.NoError(t, cl.Start(ctx))
	require.Eventually(t, func() bool { return c.MachinePID() != 0 }, 10*time.Second, 50*time.Millisecond, "power on runs the start command")
	assert.True(t, cl.Running())

	machine := c.MachinePID()

	require.NoError(t, cl.Stop(ctx))
	require.Eventually(t, func() bool { return !proc.Alive(machine) }, 10*time.Second, 50*time.Millisecond, "power off kills it")
	assert.False(t, cl.Running())

	// Stop ends a running machine with ipmi_sim.
	require.NoError(t, cl.Start(ctx))
	require.Eventually(t, func() bool { return c.MachinePID() != 0 }, 10*time.Second, 50*time.Millisecond)

	machine = c.MachinePID()
	pid := s.Pid()

	s.Stop()
	assert.True(t, proc.WaitGone(ctx, pid, 5*time.Second), "ipmi_sim is gone")
	assert.True(t, proc.WaitGone(ctx, machine, 5*time.Second), "its machine is gone")
}

func TestLabChassisCommand(t *testing.T) {
	requireTools(t)

	c := loopbackConfig(t)
	chassis := filepath.Join(t.TempDir(), "chassis")

	var err error
	c.ChassisCommand, err = FileChassis(chassis)
	require.NoError(t, err)

	s := start(t, c)
	cl := clientOf(s)

	require.NoError(t, cl.SetNextBootNetwork(true))

	out, err := cl.Run(t.Context(), "chassis", "bootparam", "get", "5")
	require.NoError(t, err)
	assert.Contains(t, out, "Boot Device Selector : Force PXE")

	require.NoError(t, cl.Start(t.Context()))
	assert.True(t, cl.Running(), "power goes through the chassis program, which keeps it")

	log, err := os.ReadFile(ChassisLog(chassis))
	require.NoError(t, err)
	assert.Contains(t, string(log), "set boot pxe")
	assert.Contains(t, string(log), "set power 1")

	// Wrong credentials are refused, and the error says which call.
	bad := clientOf(s)
	bad.Password = "wrong"
	_, err = bad.PowerState(t.Context())
	require.ErrorContains(t, err, "ipmitool power status against 127.0.0.1")
	assert.NotContains(t, err.Error(), "wrong", "the password stays out of errors")
}

// TestLabDaemonInNamespace runs ipmi_sim as the lab does: a daemon in a namespace of
// its own, reached with ipmitool from inside it, stopped by pid.
func TestLabDaemonInNamespace(t *testing.T) {
	requireTools(t)

	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}

	ns := fmt.Sprintf("anvis%d-bmc", os.Getpid()%100000)
	require.NoError(t, netns.Create(ns))

	t.Cleanup(func() {
		pids, err := netns.PIDs(ns)
		assert.NoError(t, err)
		assert.Empty(t, pids, "processes left in the namespace")

		for _, pid := range pids {
			assert.NoError(t, proc.Stop(context.Background(), pid, time.Second))
		}

		assert.NoError(t, netns.Delete(ns))
	})

	links, err := netns.OpenLinks(ns)
	require.NoError(t, err)
	require.NoError(t, links.SetUp("lo"))
	require.NoError(t, links.AddAddr("lo", netip.MustParsePrefix("10.99.1.1/32")))
	require.NoError(t, links.Close())

	c := loopbackConfig(t)
	c.LANAddr, c.LANPort = "10.99.1.1", 623
	c.ChassisCommand, err = FileChassis(filepath.Join(t.TempDir(), "chassis"))
	require.NoError(t, err)

	pid, err := StartDaemon(c, ns)
	require.NoError(t, err)

	t.Cleanup(func() {
		if t.Failed() {
			if b, err := os.ReadFile(c.Log()); err == nil {
				t.Logf("ipmi_sim log:\n%s", b)
			}
		}
	})

	ctx, cancel := context.WithTimeout(t.Context(), ListenTimeout)
	defer cancel()

	require.NoError(t, WaitListening(ctx, pid, c.LANAddr, c.LANPort))

	pids, err := netns.PIDs(ns)
	require.NoError(t, err)
	assert.Equal(t, []int{pid}, pids, "ipmi_sim itself runs in the namespace (ip netns exec execs it)")

	cl := &Client{NetNS: ns, Addr: c.LANAddr, Port: c.LANPort, User: labUser, Password: labPassword}

	on, err := cl.PowerState(t.Context())
	require.NoError(t, err)
	assert.False(t, on)

	// Not reachable from the host's namespace.
	_, err = (&Client{Addr: c.LANAddr, Port: c.LANPort, User: labUser, Password: labPassword}).Run(ctx, "-N", "1", "-R", "1", "power", "status")
	assert.Error(t, err)

	require.NoError(t, proc.Stop(t.Context(), pid, 5*time.Second))
	assert.False(t, proc.Alive(pid))
}
