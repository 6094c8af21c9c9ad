//go:build lab

package lab_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/hack/internal/lab"
	"github.com/anvil-metal/anvil/hack/internal/machine"
	"github.com/anvil-metal/anvil/internal/netns"
	"github.com/anvil-metal/anvil/internal/proc"
)

// TestLabDownSweepsWithoutState: a lab whose state file is lost (a crash, a wiped
// directory) is still brought down, by its namespaces and its directory. One machine
// has a simulated BMC (ipmi_sim), which powered it on and is swept with the rest.
func TestLabDownSweepsWithoutState(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the lab needs root")
	}

	for _, tool := range []string{"ip", "dnsmasq", "qemu-system-x86_64", "qemu-img", "ipmi_sim", "ipmitool"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s", tool)
		}
	}

	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..", "..")
	bin := t.TempDir()
	provider, power := filepath.Join(bin, "provider"), filepath.Join(bin, "lab-power")

	for out, pkg := range map[string]string{provider: "./provider/cmd/provider", power: "./hack/cmd/lab-power"} {
		build := exec.Command("go", "build", "-o", out, pkg)
		build.Dir = root

		b, err := build.CombinedOutput()
		require.NoError(t, err, "%s", b)
	}

	dir := filepath.Join(t.TempDir(), "lab")
	prefix := fmt.Sprintf("anvd%d", os.Getpid()%100000)
	ctx := context.Background()

	t.Cleanup(func() { _ = lab.Down(ctx, dir, prefix) }) // whatever the assertions left

	s, err := lab.Up(ctx, lab.Config{
		Dir: dir, Prefix: prefix, Machines: 2, Firmware: []machine.Firmware{machine.BIOS},
		ProviderBin: provider, AgentAssetsDir: t.TempDir(), APIPort: 50042,
		FactoryURL: "http://10.77.0.1:8080", FactoryPXEURL: "http://10.77.0.1:8080",
		BMC: []lab.PowerOwner{lab.OwnerNone, lab.OwnerIPMI}, PowerBin: power,
	})
	if err != nil {
		for _, log := range []string{"provider.log", "power.log", "machines/bios-1/bmc/ipmi_sim.log"} {
			b, _ := os.ReadFile(filepath.Join(dir, log)) // what there is
			t.Logf("%s:\n%s", log, b)
		}
	}

	require.NoError(t, err)

	require.True(t, proc.Alive(s.ProviderPID))
	require.True(t, proc.Alive(s.DHCPPID))
	require.True(t, proc.Alive(s.PowerPID))

	ms := s.MachineList()
	require.True(t, ms[0].Running())
	require.True(t, ms[1].Running(), "powered on through its BMC")
	require.True(t, proc.Alive(s.BMC(ms[1].Name).PID))
	require.True(t, s.Power(ms[1]).Running(), "its BMC says so")

	// The power API names the directory without a trailing slash: the namespace sweep,
	// not this one, finds it.
	require.Len(t, lab.Processes(dir), 5, "provider, dnsmasq, two QEMUs, ipmi_sim")

	// Up again keeps what runs.
	again, err := lab.Up(ctx, lab.Config{Dir: dir, Prefix: prefix, Machines: 2, PowerBin: power})
	require.NoError(t, err)
	assert.Equal(t, s.ProviderPID, again.ProviderPID)
	assert.Equal(t, s.BMC(ms[1].Name).PID, again.BMC(ms[1].Name).PID)

	pids := []int{s.ProviderPID, s.DHCPPID, s.PowerPID, s.BMC(ms[1].Name).PID, ms[0].PID(), ms[1].PID()}

	require.NoError(t, os.Remove(lab.StateFile(dir)))
	require.NoError(t, lab.Down(ctx, dir, prefix))

	assert.Empty(t, lab.Processes(dir))

	for _, pid := range pids {
		assert.False(t, proc.Alive(pid), "pid %d is left", pid)
	}

	namespaces, err := netns.List()
	require.NoError(t, err)

	for _, ns := range namespaces {
		assert.False(t, strings.HasPrefix(ns, prefix+"-"), ns)
	}

	require.NoError(t, lab.Down(ctx, dir, prefix), "down is idempotent")
}
