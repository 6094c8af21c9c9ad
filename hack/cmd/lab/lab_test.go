//go:build lab

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/hack/internal/lab"
	"github.com/anvil-metal/anvil/hack/internal/labtest"
	"github.com/anvil-metal/anvil/internal/proc"
)

// registerDeadline is generous: under TCG power-on to the agent is ~15–20 s, and the
// machine is shared with other tests.
const registerDeadline = 5 * time.Minute

// TestLabSmoke runs a lab of its own beside any running lab: a BIOS machine (SeaBIOS +
// iPXE ROM) and a UEFI machine (OVMF + iPXE ROM) PXE-boot in parallel — the site
// dnsmasq gives the address, the provider's ProxyDHCP the boot script — and their agents
// register with their MAC and inventory. Nothing is left behind, pass or fail.
func TestLabSmoke(t *testing.T) {
	labtest.RequireHost(t)

	root := labtest.RepoRoot(t)
	bin := t.TempDir()
	labBin, provider, anvilctl := filepath.Join(bin, "lab"), filepath.Join(bin, "provider"), filepath.Join(bin, "anvilctl")
	power := filepath.Join(bin, "lab-power")

	labtest.GoBuild(t, root, labBin, "./hack/cmd/lab")
	labtest.GoBuild(t, root, power, "./hack/cmd/lab-power")
	labtest.GoBuild(t, root, provider, "./provider/cmd/provider")
	labtest.GoBuild(t, root, anvilctl, "./provider/cmd/anvilctl")

	assets := labtest.AgentAssets(t, root, bin)

	dir, prefix := labtest.NewLab(t, "anvt", func(ctx context.Context, dir, prefix string) error {
		// The CLI's own down, which this test is about.
		out, err := exec.CommandContext(ctx, labBin, "--dir", dir, "--prefix", prefix, "down").CombinedOutput()
		if err != nil {
			return fmt.Errorf("%w: %s", err, out)
		}

		return nil
	})

	runLab := func(args ...string) (string, error) {
		cmd := exec.Command(labBin, append([]string{"--dir", dir, "--prefix", prefix}, args...)...)
		out, err := cmd.CombinedOutput()

		return string(out), err
	}

	// ANVIL_LAB_SMOKE_FIRMWARE=bios,uefi,uefi-pxe adds the firmware's own PXE (slower:
	// three TCG machines on a small host).
	firmware := os.Getenv("ANVIL_LAB_SMOKE_FIRMWARE")
	if firmware == "" {
		firmware = "bios,uefi"
	}

	out, err := runLab("up", "--machines", fmt.Sprint(len(strings.Split(firmware, ","))), "--firmware", firmware,
		"--provider-bin", provider, "--agent-assets-dir", assets, "--factory=false", // hack/e2e runs the factory
		"--power-bin", power) // the default power owner: the lab's power API
	poweredOn := time.Now()

	require.NoError(t, err, "lab up: %s", out)
	t.Logf("lab up:\n%s", out)

	state, err := lab.Load(dir)
	require.NoError(t, err)

	machines := state.MachineList()
	require.NotEmpty(t, machines)

	var wg sync.WaitGroup

	for _, m := range machines {
		wg.Add(1)

		go func() {
			defer wg.Done()

			var yaml string

			registered := assert.Eventually(t, func() bool {
				out, err := exec.Command(anvilctl, "--endpoint", "unix://"+state.ControlSocket(), "get", "machine", m.UUID, "-o", "yaml").CombinedOutput()
				yaml = string(out)

				// The inventory is in: the disk and the SMBIOS identity.
				return err == nil && strings.Contains(yaml, "name: vda") && strings.Contains(yaml, m.Serial)
			}, registerDeadline, time.Second, "machine %s (%s) did not register with its inventory", m.Name, m.Firmware)
			if !registered {
				return
			}

			t.Logf("machine %s (%s): power-on → registered with its inventory in %s", m.Name, m.Firmware, time.Since(poweredOn).Round(100*time.Millisecond))

			assert.Contains(t, yaml, m.MAC, m.Name)
			assert.Contains(t, yaml, m.Vendor.Manufacturer, m.Name)
			assert.Contains(t, yaml, "driver: virtio_net", m.Name)
		}()
	}

	wg.Wait()

	// Each machine's BMC is the lab's power API, registered with the provider; pending,
	// the provider keeps its hands off.
	list, err := exec.Command(anvilctl, "--endpoint", "unix://"+state.ControlSocket(), "get", "machines").CombinedOutput()
	require.NoError(t, err, "%s", list)

	for _, m := range machines {
		assert.Regexp(t, m.UUID+`\s.*\sapi unknown \[hands-off\]`, string(list), m.Name)
	}

	// The power API: a reset machine boots the agent again.
	m := machines[0]
	require.NoError(t, m.Reset(t.Context()))
	require.True(t, m.Running())

	out, err = runLab("machine", "stop", m.Name)
	require.NoError(t, err, out)
	require.False(t, m.Running())

	out, err = runLab("status")
	require.NoError(t, err, out)
	assert.Contains(t, out, m.SerialLog())
	assert.Regexp(t, `provider\s+pid \d+\s+running`, out)
}

// TestLabMachineAddAndProviderRestart drives a running lab as a user does, from the
// CLI: a machine added whose simulated IPMI BMC the lab keeps from the provider (the
// provider has no BMC for it; the CLI says how to give it, the password only by file),
// then the provider restarted, gracefully and by SIGKILL, on its state with the same
// command line — a new pid in the state file, its control API answering, every machine
// still running in the same QEMU. Down then leaves nothing. No machine needs to boot.
func TestLabMachineAddAndProviderRestart(t *testing.T) {
	labtest.RequireHost(t)

	for _, tool := range []string{"ipmi_sim", "ipmitool"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (make setup installs it)", tool)
		}
	}

	root := labtest.RepoRoot(t)
	bin := t.TempDir()
	labBin, provider, anvilctl, power := filepath.Join(bin, "lab"), filepath.Join(bin, "provider"), filepath.Join(bin, "anvilctl"), filepath.Join(bin, "lab-power")

	labtest.GoBuild(t, root, labBin, "./hack/cmd/lab")
	labtest.GoBuild(t, root, power, "./hack/cmd/lab-power")
	labtest.GoBuild(t, root, provider, "./provider/cmd/provider")
	labtest.GoBuild(t, root, anvilctl, "./provider/cmd/anvilctl")

	down := func(ctx context.Context, dir, prefix string) error {
		out, err := exec.CommandContext(ctx, labBin, "--dir", dir, "--prefix", prefix, "down").CombinedOutput()
		if err != nil {
			return fmt.Errorf("%w: %s", err, out)
		}

		return nil
	}

	dir, prefix := labtest.NewLab(t, "anva", down)

	runLab := func(args ...string) (string, error) {
		out, err := exec.Command(labBin, append([]string{"--dir", dir, "--prefix", prefix}, args...)...).CombinedOutput()

		return string(out), err
	}

	// No agent assets: the machines need not boot.
	out, err := runLab("up", "--machines", "1", "--firmware", "bios", "--memory", "512", "--provider-bin", provider,
		"--agent-assets-dir", t.TempDir(), "--factory=false", "--power-bin", power)
	require.NoError(t, err, "lab up: %s", out)

	out, err = runLab("machine", "add", "--bmc", "ipmi", "--register-bmc=false", "--memory", "768")
	require.NoError(t, err, "lab machine add: %s", out)
	t.Logf("lab machine add:\n%s", out)

	state, err := lab.Load(dir)
	require.NoError(t, err)
	require.Len(t, state.Machines, 2)

	ms := state.MachineList()
	added := ms[1]

	assert.Equal(t, "bios-1", added.Name)
	assert.Equal(t, lab.MachineBMC{Owner: lab.OwnerIPMI, LANPort: 62301, SerialPort: 62601, PID: state.BMC(added.Name).PID, Elsewhere: true},
		state.BMC(added.Name))
	assert.Contains(t, out, "machine bmc set "+added.UUID+" --kind ipmi --address 10.77.0.1 --port 62301 --username admin --password-file "+state.BMCPasswordFile())
	assert.NotContains(t, out, state.BMCPassword, "the password only by file")

	for _, m := range ms {
		require.True(t, m.Running(), m.Name)
	}

	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", added.PID()))
	require.NoError(t, err)
	assert.Contains(t, string(cmdline), "\x00-m\x00768\x00", "its own memory")
	assert.True(t, state.Power(added).Running(), "its BMC powered it on")

	ctl := labtest.Anvilctl(anvilctl, state.ControlSocket())

	bmcs, err := ctl("get", "bmcs")
	require.NoError(t, err, bmcs)
	assert.Contains(t, bmcs, ms[0].UUID, "the lab gave the first machine's BMC")
	assert.NotContains(t, bmcs, added.UUID, "nobody gave the added machine's BMC")

	out, err = runLab("machine", "bmc", added.Name)
	require.NoError(t, err, out)
	assert.Contains(t, out, "--password-file "+state.BMCPasswordFile())

	// The user gives it as printed.
	var set []string

	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == "_out/bin/anvilctl" {
			set = f[3:] // after --endpoint unix://…
		}
	}

	require.NotEmpty(t, set, out)

	given, err := ctl(set...)
	require.NoError(t, err, given)

	bmc, err := ctl("get", "bmc", added.UUID, "-o", "yaml")
	require.NoError(t, err, bmc)
	assert.True(t, labtest.HasField(bmc, "username", "admin"), bmc)
	assert.True(t, labtest.HasField(bmc, "hasPassword", "true"), bmc)
	assert.NotContains(t, bmc, state.BMCPassword)

	qemu := map[string]int{}
	for _, m := range ms {
		qemu[m.Name] = m.PID()
	}

	for _, restart := range [][]string{{"provider", "restart"}, {"provider", "restart", "--kill"}} {
		before, err := lab.Load(dir)
		require.NoError(t, err)

		out, err := runLab(restart...)
		require.NoError(t, err, "%v: %s", restart, out)

		after, err := lab.Load(dir)
		require.NoError(t, err)

		assert.NotEqual(t, before.ProviderPID, after.ProviderPID, "%v: a new provider", restart)
		assert.False(t, proc.Alive(before.ProviderPID), "%v: the old provider is gone", restart)
		assert.True(t, proc.Alive(after.ProviderPID), "%v", restart)
		assert.Equal(t, before.ProviderCommand, after.ProviderCommand, "%v: the same command line", restart)
		assert.Contains(t, out, fmt.Sprintf("pid %d, serving", after.ProviderPID), "%v", restart)

		list, err := ctl("get", "machines")
		assert.NoError(t, err, "%v: the control API answers: %s", restart, list)

		for _, m := range ms {
			assert.Equal(t, qemu[m.Name], m.PID(), "%v: %s runs in the same QEMU", restart, m.Name)
		}
	}

	pids := []int{state.BMC(added.Name).PID, ms[0].PID(), added.PID()}

	require.NoError(t, down(t.Context(), dir, prefix))

	for _, pid := range pids {
		assert.False(t, proc.Alive(pid), "pid %d is left", pid)
	}

	assert.NoFileExists(t, state.BMCPasswordFile())
}
