//go:build lab

// Package ha is the site of provider replicas on etcd, end to end: three replicas, each
// with an etcd member, behind the site's address that keepalived moves, one real QEMU
// machine with a simulated IPMI BMC. The leader is killed while the machine is being
// wiped, and again while it is being powered on for Talos; the actions are counted where
// they happen, at the BMC and on the machine's console, not in the provider's log.
package ha

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/hack/internal/lab"
	"github.com/anvil-metal/anvil/hack/internal/labtest"
	"github.com/anvil-metal/anvil/hack/internal/machine"
	"github.com/anvil-metal/anvil/internal/etcdtest"
)

const (
	apiPort = 50042
	// stepDeadline bounds each step: TCG is slow and the host shared.
	stepDeadline = 5 * time.Minute
	standin      = "TALOS-STANDIN"
	talosVersion = "v1.9.0"
)

// Counted at the simulated BMC (ipmi_sim's log) and on the machine's console.
const (
	bmcPowerOn  = ": power on (QEMU started)"
	bmcPowerOff = ": power off (QEMU stopped)"
	bmcPXEOnce  = ": next boot from the network, once"
	wipeVDA     = `wiping disk {"disk": "vda"`
	wipeOrder   = `order received {"order": "wipe-`
	bmcOrder    = `order done {"order": "bmc-provision"`
)

// TestSiteLeaderKilledE2E: the leader is SIGKILLed mid-wipe, and its successor
// mid-allocation (between the PXE-once override and the power-on it was recorded for).
// Each time another replica takes over; the machine is wiped once, provisioned once,
// powered off once when idle, powered on once for Talos, and installs once: no operation
// lost, none repeated.
func TestSiteLeaderKilledE2E(tt *testing.T) {
	t := labtest.Recording(tt)

	labtest.RequireHost(t)

	for _, tool := range []string{"ipmi_sim", "keepalived", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (make setup installs it)", tool)
		}
	}

	if _, err := os.Stat(etcdtest.Binary("")); err != nil {
		t.Skipf("needs etcd (make envtest-assets builds it): %v", err)
	}

	root := labtest.RepoRoot(t)
	bin := t.TempDir()
	provider, anvilctl, power, factory := filepath.Join(bin, "provider"), filepath.Join(bin, "anvilctl"),
		filepath.Join(bin, "lab-power"), filepath.Join(bin, "lab-factory")

	labtest.GoBuild(t, root, provider, "./provider/cmd/provider")
	labtest.GoBuild(t, root, anvilctl, "./provider/cmd/anvilctl")
	labtest.GoBuild(t, root, power, "./hack/cmd/lab-power")
	labtest.GoBuild(t, root, factory, "./hack/cmd/lab-factory")

	agent := labtest.AgentAssets(t, root, bin)
	standinDir := filepath.Join(bin, "talos-standin")
	require.NoError(t, lab.BuildStandinAssets(t.Context(), root, standinDir))

	dir, prefix := labtest.NewLab(t, "anvh", nil)

	cfg := lab.Config{
		Dir: dir, Prefix: prefix, Machines: 1, Replicas: 3,
		Firmware:    []machine.Firmware{machine.BIOS},
		BMC:         []lab.PowerOwner{lab.OwnerIPMI},
		ProviderBin: provider, AgentAssetsDir: agent, PowerBin: power,
		FactoryBin: factory, FactoryAssetsDir: standinDir,
		FactoryURL: "http://" + lab.FactoryListen, FactoryPXEURL: "http://" + lab.FactoryListen,
		APIPort: apiPort,
	}

	start := time.Now()
	step := func(what string, since time.Time) {
		t.Logf("%-66s %6.1fs (t=%.1fs)", what, time.Since(since).Seconds(), time.Since(start).Seconds())
	}

	s, err := lab.Up(t.Context(), cfg)
	require.NoError(t, err)

	m := s.MachineList()[0]
	bmcLog := s.BMCLog(m)
	count := func(path, what string) int { return strings.Count(readFile(path), what) }

	// Any live replica serves the control API; the test asks one that is not the leader.
	ctlOf := func() func(args ...string) (string, error) {
		leader, _ := s.Leader(t.Context(), apiPort)

		for i, r := range s.Replicas {
			if i != leader && alive(r.PID) {
				return labtest.Anvilctl(anvilctl, s.ReplicaControlSocket(i))
			}
		}

		return labtest.Anvilctl(anvilctl, s.ReplicaControlSocket(leader))
	}

	yaml := func(kind string) string {
		out, _ := ctlOf()("get", kind, m.UUID, "-o", "yaml")

		return out
	}

	leader := waitLeader(t, s, -1)
	t.Logf("replica r%d leads; the site's address is on r%d", leader, vipHolder(t, s))

	// 1. The machine boots the agent through the site's address and registers.
	t0 := time.Now()

	require.Eventually(t, func() bool { return strings.Contains(yaml("machine"), "name: vda") },
		stepDeadline, time.Second, "the machine did not register")
	step("power-on → agent registered through the site's address", t0)

	// 2. Accepted: BMC provisioned, then wiped. The leader is killed once the wipe is
	// ordered, while the agent wipes.
	t0 = time.Now()

	out, err := ctlOf()("machine", "accept", m.UUID)
	require.NoError(t, err, out)

	require.Eventually(t, func() bool { return count(m.SerialLog(), wipeOrder) > 0 },
		stepDeadline, 20*time.Millisecond, "no wipe was ordered")

	leader = waitLeader(t, s, -1)
	killed := time.Now()

	require.NoError(t, s.KillReplica(t.Context(), leader))
	step(fmt.Sprintf("accept → wipe ordered; leader r%d SIGKILLed", leader), t0)

	next := waitLeader(t, s, leader)
	takeover1 := time.Since(killed)
	step(fmt.Sprintf("leader r%d killed → r%d leads", leader, next), killed)

	require.Eventually(t, func() bool {
		return regexp.MustCompile(`(?m)^\s*state: '?off'?$`).MatchString(yaml("power"))
	}, stepDeadline, time.Second, "the wiped, idle machine was not powered off")
	step("wiped, then powered off by the new leader", killed)

	assert.Equal(t, 1, count(m.SerialLog(), wipeVDA), "the disk was wiped once")
	assert.Equal(t, 1, count(m.SerialLog(), bmcOrder), "the BMC user was provisioned once")
	assert.Equal(t, 1, count(bmcLog, m.Name+bmcPowerOff), "the idle machine was powered off once")

	intent := yaml("intent")
	status := yaml("machinestatus")
	wipeID := field(intent, "wipeID")
	require.NotEmpty(t, wipeID, "the accepted machine owes a wipe:\n%s", intent)
	assert.Equal(t, wipeID, field(status, "wipedID"), "the wipe was recorded done:\n%s", status)

	// 3. Allocated: the new leader sets PXE once and powers on; it is killed between the
	// two (or just after), and the next takes over without doing either again.
	onsBefore, pxeBefore := count(bmcLog, m.Name+bmcPowerOn), count(bmcLog, m.Name+bmcPXEOnce)
	t0 = time.Now()

	out, err = ctlOf()("machine", "allocate", m.UUID, "--talos-version", talosVersion)
	require.NoError(t, err, out)

	require.Eventually(t, func() bool { return count(bmcLog, m.Name+bmcPXEOnce) > pxeBefore },
		stepDeadline, 20*time.Millisecond, "the allocated machine was not set to boot from the network")

	leader = next
	killed = time.Now()

	require.NoError(t, s.KillReplica(t.Context(), leader))
	step(fmt.Sprintf("allocate → PXE once set; leader r%d SIGKILLed", leader), t0)

	next = waitLeader(t, s, leader)
	takeover2 := time.Since(killed)
	step(fmt.Sprintf("leader r%d killed → r%d leads", leader, next), killed)

	require.Eventually(t, func() bool { return count(m.SerialLog(), standin+" installed") > 0 },
		stepDeadline, time.Second, "Talos (the stand-in) did not install")
	step("Talos installed", t0)

	require.Eventually(t, func() bool { return strings.Contains(yaml("machinestatus"), "installedAllocation:") },
		stepDeadline, time.Second, "the install was not recorded")

	// Let the last leader poll a few times: nothing more may happen at the BMC.
	time.Sleep(15 * time.Second)

	ons := count(bmcLog, m.Name+bmcPowerOn) - onsBefore
	assert.Equal(t, 1, ons, "the machine was powered on once for Talos (BMC log):\n%s", readFile(bmcLog))
	assert.LessOrEqual(t, count(bmcLog, m.Name+bmcPXEOnce)-pxeBefore, 2,
		"the PXE-once override is set at most again, by the new leader, when the power-on it was for never happened")
	assert.Equal(t, 1, count(m.SerialLog(), standin+" installed"), "Talos installed once")
	assert.Equal(t, 1, count(m.SerialLog(), wipeVDA), "no wipe after the allocation")
	assert.Equal(t, 1, count(bmcLog, m.Name+bmcPowerOff), "never powered off again")

	t.Logf("takeovers (SIGKILL, lease TTL 10s): mid-wipe %.1fs, mid-allocation %.1fs", takeover1.Seconds(), takeover2.Seconds())
	t.Logf("BMC actions: power on %d, PXE once %d, power off %d; wipes %d; installs %d",
		ons, count(bmcLog, m.Name+bmcPXEOnce)-pxeBefore, count(bmcLog, m.Name+bmcPowerOff),
		count(m.SerialLog(), wipeVDA), count(m.SerialLog(), standin+" installed"))
}

// waitLeader waits until a replica other than not leads, and returns it.
func waitLeader(t labtest.T, s *lab.State, not int) int {
	t.Helper()

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	for {
		if i, err := s.Leader(ctx, apiPort); err == nil && i >= 0 && i != not {
			return i
		}

		select {
		case <-ctx.Done():
			t.Fatalf("no replica (other than r%d) leads within 2 minutes", not)

			return -1
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func vipHolder(t labtest.T, s *lab.State) int {
	t.Helper()

	i, err := s.VIPHolder()
	require.NoError(t, err)

	return i
}

func alive(pid int) bool {
	if pid <= 0 {
		return false
	}

	_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))

	return err == nil
}

// field is a top-level field's value in a resource's YAML.
func field(y, key string) string {
	if m := regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(key) + `:\s*"?([^"\n]*)"?$`).FindStringSubmatch(y); m != nil {
		return strings.TrimSpace(m[1])
	}

	return ""
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)

	return string(b)
}
