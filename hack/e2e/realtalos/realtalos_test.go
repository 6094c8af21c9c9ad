//go:build lab

// Package realtalos is the standalone provider's end-to-end flow on real Talos (make
// talos: Talos v1.13 built from its Go module), both ways into it: one machine handed
// over by kexec from its running agent, one booted through its firmware and iPXE from
// the provider's cache. Talos fetches its configuration from Anvil's metadata server,
// installs itself, reports the install to Anvil's event sink, runs from its disk, and
// answers real talosctl over mutual TLS. It is make e2e's, after the stand-in's matrix:
// real Talos under TCG takes ~10 minutes a boot and install.
package realtalos

import (
	"fmt"
	"os"
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
	"github.com/anvil-metal/anvil/hack/internal/timeline"
	"github.com/anvil-metal/anvil/internal/labfactory"
)

const (
	// stepDeadline bounds a step of the agent (power-on to registered, a wipe) or of an
	// installed Talos' API: under TCG ~30–60 s, on two cores shared by two machines.
	stepDeadline = 6 * time.Minute
	// kexecTimeout is the provider's deadline for a kexec'd Talos to be seen up (its
	// config fetched): the agent downloads and loads real Talos' initramfs under TCG,
	// which the default 5 minutes may not cover, and the test asserts the handoff went
	// through without the BMC.
	kexecTimeout = 25 * time.Minute

	clusterName = "real-talos"
	// kubernetesVersion is one Talos v1.13 supports; Kubernetes never starts in the lab.
	kubernetesVersion = "1.32.0"
	installDisk       = "/dev/vda"
)

var (
	allocationRe = regexp.MustCompile(`allocation (\S+), schematic (\S+)\)`)
	addressRe    = regexp.MustCompile(`lastAddress: (\S+)`)

	restarting = timeline.Any("reboot: Restarting system")
	ipxeBanner = timeline.Any("iPXE initialising devices", "iPXE 1.")
	kexecJump  = timeline.Any("kexec_core: Starting new kernel")
	// talosKernel is the Talos kernel's command line, printed as it starts.
	talosKernel = timeline.All("Command line:", labtest.TalosKernel)
)

// node is one lab machine and how it goes into Talos.
type node struct {
	m         *machine.Machine
	kexec     bool // by kexec from its agent; else through its firmware
	address   string
	alloc     string
	allocated time.Time
	power     int // the power API's actions on it before the allocation
}

func (n *node) way() string {
	if n.kexec {
		return "kexec"
	}

	return "firmware, iPXE"
}

// TestE2ERealTalos: see the package comment. A lab of two BIOS machines of 2 GiB, each
// powered by the lab's power API, idle machines kept on (their agents up):
//
//  1. both register and are accepted; their agents wipe them;
//  2. machine B is set to kexec never; both are allocated with the real Talos version
//     and a control-plane configuration made with Talos' machinery (install disk, the
//     factory's installer of the allocation's schematic, its registry mirror, time sync
//     off);
//  3. A's agent kexecs into the Talos kernel and initramfs from the provider's cache (no
//     BMC action, no firmware); B's agent reboots, the firmware PXE-boots and iPXE loads
//     Talos from the provider's cache; both kernels carry the factory's command line, the
//     site's arguments and the boot's own (talos.config=, talos.events.sink=);
//  4. Talos loads its configuration from the metadata server, installs itself, and its
//     install sequence's event reaches Anvil's sink: Anvil records the machine installed;
//     Talos kexecs into the installed system and runs on its STATE's configuration;
//  5. real talosctl reads each node's version with the cluster's talosconfig (mutual
//     TLS against the configuration's OS CA);
//  6. rebooted through Anvil (PXE once and a power cycle), each machine boots its disk:
//     GRUB, then Talos on its STATE's configuration; the provider's decision was the disk.
//
// Figures in _out/e2e/real-talos-report.txt, with the stand-in's from _out/e2e/report.txt
// beside them when TestE2E wrote one.
func TestE2ERealTalos(tt *testing.T) {
	t := labtest.Recording(tt)

	labtest.RequireHost(t)

	root := labtest.RepoRoot(t)
	talosctlBin := labtest.Talosctl(t, root)
	talos := labtest.TalosAssets(t, root)

	bin := t.TempDir()
	bins := labtest.BuildPrograms(t, root, bin)
	provider, factory, power, anvilctl, agent := bins.Provider, bins.Factory, bins.Power, bins.Anvilctl, bins.Agent

	dir, prefix := labtest.NewLab(t, "anvr", nil)
	consoles := timeline.Follow(t.Context(), filepath.Join(dir, "machines", "*", "serial.log"), 50*time.Millisecond)

	cfg := lab.Config{
		Dir: dir, Prefix: prefix, Machines: 2,
		Firmware: []machine.Firmware{machine.BIOS, machine.BIOS},
		BMC:      []lab.PowerOwner{lab.OwnerAPI, lab.OwnerAPI},
		// Real Talos needs 2 GiB; one vCPU, as its kernel's text patching under TCG
		// with two sometimes hangs or panics it as it boots.
		MemoryMB: 2048, CPUs: 1,
		PowerBin: power, ProviderBin: provider, AgentAssetsDir: agent,
		FactoryURL: "http://" + lab.FactoryListen, FactoryPXEURL: "http://" + lab.FactoryListen,
		FactoryBin: factory, TalosAssetsDir: talos.Dir,
		ProviderArgs: []string{
			"--talos-kernel-args", labtest.TalosKernelArgs,
			// Accepted machines keep their agents up: an allocation is a kexec away.
			"--power-idle-default", "on",
			"--kexec-timeout", kexecTimeout.String(),
			// The factory's real Talos has no extension images: TCG's CPU would call for
			// amd-ucode.
			"--detected-extensions=false",
		},
		APIPort: 50042,
	}

	state, err := lab.Up(t.Context(), cfg)
	require.NoError(t, err)

	r := &rig{t: t, ctl: labtest.Anvilctl(anvilctl, state.ControlSocket()), consoles: consoles, state: state, talos: talos, rep: &labtest.Report{}}

	machines := state.MachineList()
	require.Len(t, machines, 2)

	nodes := []*node{{m: machines[0], kexec: true}, {m: machines[1]}}
	each := func(f func(*node)) {
		labtest.ForEach(machines, func(m *machine.Machine) {
			for _, n := range nodes {
				if n.m == m {
					f(n)
				}
			}
		})
	}

	// 1. Registered, accepted, wiped; idle with their agents up.
	t.Run("accepted", func(t labtest.T) {
		each(func(n *node) { r.accept(t, n) })
	})
	require.False(t, t.Failed(), "the machines must be accepted and wiped first")

	// 2. Allocated, with the cluster's configuration.
	schematic := talos.Schematic(t)
	endpoints := []string{nodes[0].address, nodes[1].address}
	cluster := makeClusterConfig(t, talos, talos.InstallImage(schematic), endpoints)
	configFile := filepath.Join(t.TempDir(), "controlplane.yaml")
	require.NoError(t, os.WriteFile(configFile, cluster.config, 0o600))

	out, err := r.ctl("machine", "kexec", "never", nodes[1].m.UUID)
	require.NoError(t, err, out)

	for _, n := range nodes {
		n.power = powerActions(state, n.m)
		n.allocated = time.Now()

		out, err := r.ctl("machine", "allocate", n.m.UUID, "--talos-version", talos.Version, "--config", configFile)
		require.NoError(t, err, out)

		sm := allocationRe.FindStringSubmatch(out)
		require.NotNil(t, sm, "no allocation and schematic in: %s", out)
		require.Equal(t, schematic, sm[2], "%s: the schematic the config's installer names is the allocation's", n.m.Name)

		n.alloc = sm[1]
	}

	// 3–4. Into Talos each way; configured, installed, running from disk.
	t.Run("installed", func(t labtest.T) {
		each(func(n *node) { r.install(t, n) })
	})

	// 5. talosctl over mutual TLS.
	t.Run("talosctl", func(t labtest.T) {
		each(func(n *node) { r.version(t, n, cluster, talosctlBin, "installed") })
	})

	// 6. Rebooted through Anvil: the disk, GRUB, Talos on its STATE.
	t.Run("reboot to disk", func(t labtest.T) {
		each(func(n *node) { r.reboot(t, n) })
		each(func(n *node) { r.version(t, n, cluster, talosctlBin, "rebooted") })
	})

	r.rep.Write(t, root, "Standalone Anvil on real Talos "+talos.Version, reportName)
	appendStandinFigures(t, root)
}

// reportName is the test's report under _out/e2e.
const reportName = "real-talos-report.txt"

// rig is what the steps share.
type rig struct {
	t        testing.TB
	ctl      func(...string) (string, error)
	consoles *timeline.Consoles
	state    *lab.State
	talos    labtest.RealTalos
	rep      *labtest.Report
}

func (r *rig) get(typ, id string) string {
	out, err := r.ctl("get", typ, id, "-o", "yaml")
	if err != nil {
		return ""
	}

	return out
}

// accept waits for the machine's agent, accepts it and waits for its wipe.
func (r *rig) accept(t testing.TB, n *node) {
	m := n.m

	poweredOn, err := labtest.PoweredOn(m)
	if !assert.NoError(t, err, m.Name) {
		return
	}

	if !labtest.Eventually(t, stepDeadline, m.Name+" registered with its inventory", func() error {
		if y := r.get("machine", m.UUID); !strings.Contains(y, "name: vda") {
			return fmt.Errorf("not yet: %s", y)
		}

		return nil
	}) {
		return
	}

	r.rep.Add("power-on → agent registered", m, time.Since(poweredOn))

	if a := addressRe.FindStringSubmatch(r.get("machine", m.UUID)); assert.NotNil(t, a, "%s: no address", m.Name) {
		n.address = a[1]
	}

	accepted := time.Now()

	out, err := r.ctl("machine", "accept", m.UUID)
	if !assert.NoError(t, err, out) {
		return
	}

	if labtest.Eventually(t, stepDeadline, m.Name+" wiped", func() error {
		if !regexp.MustCompile(`(?s)lastWipe:.*device: vda.*verified:`).MatchString(r.get("machine", m.UUID)) {
			return fmt.Errorf("no wipe of vda reported")
		}

		return nil
	}) {
		r.rep.Add("accept → wiped", m, time.Since(accepted))
	}
}

// install follows the allocated machine into Talos, its configuration, its install and
// its first run from disk.
func (r *rig) install(t testing.TB, n *node) {
	m, serial := n.m, n.m.SerialLog()

	// Into Talos, each its way.
	if !labtest.Eventually(t, labtest.TalosDeadline, m.Name+"'s Talos kernel ("+n.way()+")", func() error {
		if _, ok := r.consoles.First(serial, n.allocated, talosKernel); !ok {
			return fmt.Errorf("no Talos kernel command line on the console")
		}

		return nil
	}) {
		return
	}

	kernel, _ := r.consoles.First(serial, n.allocated, talosKernel)
	r.rep.Add("allocation → Talos kernel ("+n.way()+")", m, kernel.At.Sub(n.allocated))

	r.assertWay(t, n, kernel)
	r.assertCmdline(t, n, kernel.Text)

	// Its configuration from Anvil's metadata server, validated by Talos.
	if !r.waitSerial(t, n, "loaded its config from the metadata server", labtest.TalosFromMetal) {
		return
	}

	installed := fmt.Sprintf(labtest.TalosInstalledFmt, r.talos.Version)

	// Installed by its own installer (the factory's image, pulled from its registry); its
	// install sequence's event reaches Anvil's sink.
	if !r.waitSerial(t, n, "installed by Talos' installer", installed) {
		return
	}

	if labtest.Eventually(t, stepDeadline, m.Name+" recorded installed from Talos' event", func() error {
		y := r.get("machine", m.UUID)
		if !labtest.HasField(y, "installedAllocation", n.alloc) || !labtest.HasField(y, "installedBy", "event-sink") {
			return fmt.Errorf("not installed by the event sink for allocation %s", n.alloc)
		}

		return nil
	}) {
		r.rep.Add("allocation → Anvil: installed (Talos' event)", m, time.Since(n.allocated))
	}

	// Talos kexecs into the installed system, which loads its STATE's configuration.
	r.waitSerial(t, n, "running from its disk on its installed config", labtest.TalosFromState)

	// No BMC touched it: the agent's kexec, or its own reboot, and Talos' kexec after the
	// install were all the way in.
	assert.Equal(t, n.power, powerActions(r.state, m), "%s: the power API acted on the machine on its way into Talos (%s)", m.Name, n.way())

	if n.kexec {
		r.assertHandoff(t, n)
	}
}

// waitSerial waits for the Talos line on the machine's console since its allocation
// and records when it came; a configuration Talos refused fails the wait at once.
func (r *rig) waitSerial(t testing.TB, n *node, what, line string) bool {
	var refused string

	ok := labtest.Eventually(t, labtest.TalosDeadline, n.m.Name+" "+what, func() error {
		if refused = labtest.RefusedConfig(n.m.SerialLog()); refused != "" {
			return nil
		}

		if _, ok := r.consoles.First(n.m.SerialLog(), n.allocated, timeline.Any(line)); !ok {
			return fmt.Errorf("no %q on the console", line)
		}

		return nil
	})

	if refused != "" {
		t.Errorf("%s: Talos refused the configuration Anvil served: %s", n.m.Name, refused)

		return false
	}

	if ok {
		l, _ := r.consoles.First(n.m.SerialLog(), n.allocated, timeline.Any(line))
		r.rep.Add("allocation → "+what, n.m, l.At.Sub(n.allocated))
	}

	return ok
}

// assertWay checks how the machine went from its agent to the Talos kernel: by kexec, no
// reboot and no firmware on the way; through the firmware, the agent's reboot, iPXE and
// the provider's cached Talos.
func (r *rig) assertWay(t testing.TB, n *node, kernel timeline.Line) {
	m, serial := n.m, n.m.SerialLog()
	seen := func(match func(string) bool) bool {
		l, ok := r.consoles.First(serial, n.allocated, match)

		return ok && !l.At.After(kernel.At)
	}

	if n.kexec {
		if jump, ok := r.consoles.First(serial, n.allocated, kexecJump); assert.True(t, ok && !jump.At.After(kernel.At), "%s: the agent's kexec", m.Name) {
			r.rep.Add("allocation → kexec jump", m, jump.At.Sub(n.allocated))
		}

		assert.False(t, seen(restarting), "%s: a reboot on the way to Talos by kexec", m.Name)
		assert.False(t, seen(ipxeBanner), "%s: the firmware on the way to Talos by kexec", m.Name)

		return
	}

	assert.True(t, seen(restarting), "%s: the agent's reboot", m.Name)
	assert.True(t, seen(ipxeBanner), "%s: iPXE after the reboot", m.Name)
	assert.True(t, seen(timeline.Any("/assets/talos/")), "%s: iPXE loaded Talos from the provider's cache", m.Name)
	assert.False(t, seen(kexecJump), "%s: a kexec on the way through the firmware", m.Name)
}

// assertCmdline checks the Talos kernel's command line: the factory's for the
// schematic (Talos' defaults, KSPP's among them, and the site's arguments), and the
// boot's own, the metadata URL with the machine's token and the event sink.
func (r *rig) assertCmdline(t testing.TB, n *node, line string) {
	want, err := labfactory.TalosCmdline(r.talos.Version, "metal", "amd64", strings.Fields(labtest.TalosKernelArgs))
	if !assert.NoError(t, err) {
		return
	}

	_, got, _ := strings.Cut(line, "Command line:")
	args := strings.Fields(got)

	for _, arg := range strings.Fields(want) {
		assert.Contains(t, args, arg, "%s: the factory's command line on the Talos kernel (%s)", n.m.Name, n.way())
	}

	provider := r.state.AdvertiseAddr() + ":50042"
	assert.Contains(t, got, "talos.config=https://"+provider+"/metadata/"+n.m.UUID+"?token=", "%s: the boot's metadata URL", n.m.Name)
	assert.Contains(t, args, "talos.events.sink="+provider, "%s: the boot's event sink", n.m.Name)
}

// assertHandoff checks the provider's record of the kexec handoff: ordered, loaded, and
// confirmed by Talos' config fetch; no fallback through the BMC.
func (r *rig) assertHandoff(t testing.TB, n *node) {
	y := r.get("machinestatus", n.m.UUID)

	assert.True(t, labtest.HasField(y, "allocationID", n.alloc), "%s: the handoff of allocation %s:\n%s", n.m.Name, n.alloc, y)

	for _, field := range []string{"orderedAt:", "loadedAt:", "confirmedAt:"} {
		assert.Contains(t, y, field, "%s: the kexec handoff", n.m.Name)
	}

	assert.NotContains(t, y, "failure:", "%s: the kexec handoff failed", n.m.Name)
	assert.NotContains(t, r.get("powerstatus", n.m.UUID), "handoffRebootID", "%s: a fallback through the BMC", n.m.Name)
}

// version runs talosctl version against the node until its apid answers.
func (r *rig) version(t testing.TB, n *node, cluster clusterConfig, bin, when string) {
	labtest.Eventually(t, stepDeadline, "talosctl version of "+n.m.Name+" ("+when+")", func() error {
		out, err := talosctl(t.Context(), r.state.ProviderNS, bin, cluster.talosconfig, n.address, "version")
		if err != nil {
			return err
		}

		return serverVersion(out, r.talos.Version)
	})
}

// reboot has Anvil reboot the installed machine through its BMC and waits for it to come
// up from its disk.
func (r *rig) reboot(t testing.TB, n *node) {
	m, serial := n.m, n.m.SerialLog()
	grub, fromState, power := labtest.CountIn(serial, labtest.GRUBBoot), labtest.CountIn(serial, labtest.TalosFromState), powerActions(r.state, m)
	asked := time.Now()

	out, err := r.ctl("machine", "reboot", m.UUID)
	if !assert.NoError(t, err, out) {
		return
	}

	if labtest.Eventually(t, labtest.TalosDeadline, m.Name+" rebooted into its disk's GRUB and Talos on its STATE", func() error {
		if c := labtest.CountIn(serial, labtest.GRUBBoot); c <= grub {
			return fmt.Errorf("GRUB %d times, as before", c)
		}

		if c := labtest.CountIn(serial, labtest.TalosFromState); c <= fromState {
			return fmt.Errorf("config from STATE %d times, as before", c)
		}

		return nil
	}) {
		r.rep.Add("reboot → GRUB → Talos on its STATE config", m, time.Since(asked))
	}

	assert.True(t, labtest.HasField(r.get("machine", m.UUID), "lastDecision", "disk"), "%s: the boot after the install went to the disk", m.Name)
	assert.Greater(t, powerActions(r.state, m), power, "%s: the reboot went through the power API", m.Name)
}

// powerActions counts the lab power API's actions on m (power changes, PXE once): its
// log's lines about m's power.
func powerActions(state *lab.State, m *machine.Machine) int {
	b, err := os.ReadFile(state.PowerLog())
	if err != nil {
		return 0
	}

	n := 0

	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, `"machine":"`+m.UUID+`"`) &&
			(strings.Contains(l, `"msg":"power"`) || strings.Contains(l, `"msg":"next boot network"`)) {
			n++
		}
	}

	return n
}

// appendStandinFigures adds the stand-in's figures (TestE2E's report, when there is
// one) to this test's report, for comparison.
func appendStandinFigures(t testing.TB, root string) {
	standin, err := os.ReadFile(filepath.Join(root, "_out", "e2e", "report.txt"))
	if err != nil {
		t.Logf("no stand-in figures to compare with (make e2e's TestE2E writes _out/e2e/report.txt): %v", err)

		return
	}

	out := filepath.Join(root, "_out", "e2e", reportName)

	f, err := os.OpenFile(out, os.O_APPEND|os.O_WRONLY, 0)
	if !assert.NoError(t, err) {
		return
	}

	defer f.Close()

	_, err = fmt.Fprintf(f, "\nThe stand-in Talos, for comparison (_out/e2e/report.txt):\n\n%s", standin)
	assert.NoError(t, err)
}
