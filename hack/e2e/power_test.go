//go:build lab

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/hack/internal/lab"
	"github.com/anvil-metal/anvil/hack/internal/labnet"
	"github.com/anvil-metal/anvil/hack/internal/labtest"
	"github.com/anvil-metal/anvil/hack/internal/machine"
	"github.com/anvil-metal/anvil/hack/internal/timeline"
	"github.com/anvil-metal/anvil/internal/ipmisim"
)

// TestPowerE2E is the IPMI loop on a lab of its own: a BIOS machine whose only power
// owner is a simulated BMC (ipmi_sim) is powered on through that BMC, boots the agent and
// registers; while it is pending the provider never opens a session with its BMC; once
// accepted, the provider has the agent provision a BMC user in-band (/dev/ipmi0, backed
// by the same ipmi_sim) and, with those credentials, powers the idle machine off over
// RMCP+, powers it on with PXE once when asked, and power-cycles it on a reboot request:
// each time the agent boots anew.
func TestPowerE2E(tt *testing.T) {
	t := labtest.Recording(tt)

	labtest.RequireHost(t)

	for _, tool := range []string{"ipmi_sim", "ipmitool"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (make setup installs it)", tool)
		}
	}

	root := labtest.RepoRoot(t)
	bin := t.TempDir()
	provider, anvilctl, power := filepath.Join(bin, "provider"), filepath.Join(bin, "anvilctl"), filepath.Join(bin, "lab-power")

	labtest.GoBuild(t, root, provider, "./provider/cmd/provider")
	labtest.GoBuild(t, root, anvilctl, "./provider/cmd/anvilctl")
	labtest.GoBuild(t, root, power, "./hack/cmd/lab-power")

	agent := labtest.AgentAssets(t, root, bin)

	dir, prefix := labtest.NewLab(t, "anvp", nil)

	cfg := lab.Config{
		Dir: dir, Prefix: prefix, Machines: 1,
		Firmware:    []machine.Firmware{machine.BIOS},
		BMC:         []lab.PowerOwner{lab.OwnerIPMI},
		ProviderBin: provider, AgentAssetsDir: agent, PowerBin: power,
		FactoryURL: "http://" + lab.FactoryListen, FactoryPXEURL: "http://" + lab.FactoryListen,
		APIPort: 50042,
	}

	start := time.Now()
	step := func(what string, since time.Time) {
		t.Logf("%-62s %6.1fs (t=%.1fs)", what, time.Since(since).Seconds(), time.Since(start).Seconds())
	}

	// 1. The lab powers the machine on through its BMC (the lab's own admin on ipmi_sim).
	state, err := lab.Up(t.Context(), cfg)
	require.NoError(t, err)

	m := state.MachineList()[0]
	bmc := state.BMC(m.Name)
	simLog := state.BMCLog(m)

	require.Equal(t, lab.OwnerIPMI, bmc.Owner)
	require.True(t, m.Running(), "the machine runs after lab up")
	require.Contains(t, readFile(simLog), "chassis "+m.Name+": power on (QEMU started)", "powered on through ipmi_sim")

	on, err := state.BMCClient(m).PowerState(t.Context())
	require.NoError(t, err)
	require.True(t, on, "ipmi_sim reports the power on")

	// Every session so far is the lab's; from here until acceptance there must be none.
	labSessions := strings.Count(readFile(simLog), ipmisim.SessionLine)

	ctl := labtest.Anvilctl(anvilctl, state.ControlSocket())

	yamlOf := func(kind string) string {
		out, _ := ctl("get", kind, m.UUID, "-o", "yaml")

		return out
	}

	// The lab told the provider the BMC's address and port, and no credentials.
	bmcYAML := yamlOf("bmc")
	assert.Contains(t, bmcYAML, "kind: ipmi")
	assert.Contains(t, bmcYAML, "address: "+labnet.ProviderAddr)
	assert.Contains(t, bmcYAML, fmt.Sprintf("port: %d", bmc.LANPort))
	assert.NotContains(t, bmcYAML, "username:")

	// 2. The agent registers; the machine is pending.
	t0 := time.Now()

	require.Eventually(t, func() bool {
		y := yamlOf("machine")

		return strings.Contains(y, "name: vda") && strings.Contains(y, m.Serial)
	}, stepDeadline, time.Second, "the machine did not register")
	step("power-on through the BMC → agent registered", t0)

	boots := agentBoots(t, state.ProviderLog(), m.UUID)
	require.Len(t, boots, 1, "one agent boot so far")

	// Pending: hands off. The provider polls every 5 s; give it a few rounds.
	time.Sleep(12 * time.Second)
	assert.Equal(t, labSessions, strings.Count(readFile(simLog), ipmisim.SessionLine), "the provider opened a session with a pending machine's BMC")
	assert.True(t, m.Running(), "the pending machine was left alone")

	// 3. Accept: the provider has the agent provision a BMC user in-band.
	t0 = time.Now()

	out, err := ctl("machine", "accept", m.UUID)
	require.NoError(t, err, out)

	require.Eventually(t, func() bool {
		y := yamlOf("bmc")

		return strings.Contains(y, "username: anvil") && strings.Contains(y, "hasPassword: true")
	}, stepDeadline, time.Second, "the agent's BMC credentials did not reach the BMC config (provider/agent BMC provisioning)")
	step("accept → BMC user provisioned in-guest, recorded", t0)

	bmcYAML = yamlOf("bmc")
	assert.Contains(t, bmcYAML, "address: "+labnet.ProviderAddr, "the lab-supplied address is kept")
	assert.Contains(t, bmcYAML, fmt.Sprintf("port: %d", bmc.LANPort), "the lab-supplied port is kept")

	// 4. Idle and accepted (after its wipe): the provider powers it off over IPMI, with
	// the provisioned credentials.
	require.Eventually(t, func() bool {
		out, err := ctl("get", "machines")

		return err == nil && !m.Running() && powerColumn(out, m.UUID) == "ipmi off"
	}, stepDeadline, time.Second, "the provider did not power the idle machine off over IPMI")
	step("accept → powered off over IPMI (QEMU gone, POWER ipmi off)", t0)

	log := readFile(simLog)
	assert.Contains(t, log, "chassis "+m.Name+": power off (QEMU stopped)")
	assert.Greater(t, strings.Count(log, ipmisim.SessionLine), labSessions, "the provider's sessions")

	// 5. Power on: PXE once, then on; the agent boots again.
	t0 = time.Now()

	out, err = ctl("machine", "power", "on", m.UUID)
	require.NoError(t, err, out)

	boots = waitNewBoot(t, state.ProviderLog(), m.UUID, boots, "power on")
	step("power on → new agent boot", t0)
	assert.Contains(t, readFile(simLog), "chassis "+m.Name+": next boot from the network, once", "PXE once before the power-on")

	require.Eventually(t, func() bool {
		out, err := ctl("get", "machines")

		return err == nil && powerColumn(out, m.UUID) == "ipmi on"
	}, stepDeadline, time.Second, "POWER does not say ipmi on")

	// 6. Reboot: PXE once, then a power cycle; the agent boots again.
	t0 = time.Now()

	out, err = ctl("machine", "reboot", m.UUID)
	require.NoError(t, err, out)

	waitNewBoot(t, state.ProviderLog(), m.UUID, boots, "reboot")
	step("reboot → new agent boot", t0)

	assert.GreaterOrEqual(t, strings.Count(readFile(m.SerialLog()), "metal agent starting"), 3, "three agent boots on the console")
}

// agentBoots lists the boot IDs the machine's agents connected with, in order.
func agentBoots(t testing.TB, providerLog, uuid string) []string {
	t.Helper()

	entries, err := timeline.ReadProviderLog(providerLog)
	require.NoError(t, err)

	var boots []string

	for _, e := range entries {
		if e.Msg != "agent connected" || e.Machine != uuid {
			continue
		}

		if b, _ := e.Fields["boot"].(string); b != "" && !slices.Contains(boots, b) {
			boots = append(boots, b)
		}
	}

	return boots
}

// waitNewBoot waits for an agent boot not in before, and returns them all.
func waitNewBoot(t testing.TB, providerLog, uuid string, before []string, after string) []string {
	t.Helper()

	var boots []string

	require.Eventually(t, func() bool {
		boots = agentBoots(t, providerLog, uuid)

		return len(boots) > len(before)
	}, stepDeadline, time.Second, "no new agent boot after %s", after)

	for _, b := range before {
		assert.Contains(t, boots, b)
	}

	return boots
}

var spaces = regexp.MustCompile(`\s{2,}`)

// powerColumn is the POWER column of the machine's row in "get machines".
func powerColumn(table, uuid string) string {
	lines := strings.Split(table, "\n")
	if len(lines) == 0 {
		return ""
	}

	header := spaces.Split(strings.TrimSpace(lines[0]), -1)

	col := -1

	for i, h := range header {
		if h == "POWER" {
			col = i
		}
	}

	for _, l := range lines[1:] {
		if !strings.HasPrefix(l, uuid) {
			continue
		}

		if cells := spaces.Split(strings.TrimSpace(l), -1); col >= 0 && col < len(cells) {
			return cells[col]
		}
	}

	return ""
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)

	return string(b)
}
