//go:build lab

// Package agentmode is the agent as a Talos extension on real Talos
// (TestE2EAgentModeTalos): a lab machine boots real Talos in agent mode with Anvil's
// metal-agent extension, registers, is wiped, allocated and installed; beside it, the
// same lab's boot of Anvil's own agent initramfs, for the boot times. A package of its
// own, as it needs real Talos (make talos) and runs in make e2e, not make lab.
package agentmode

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/image-factory/pkg/schematic"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/hack/internal/lab"
	"github.com/anvil-metal/anvil/hack/internal/labtest"
	labmachine "github.com/anvil-metal/anvil/hack/internal/machine"
)

const (
	// bootDeadline bounds real Talos' boot under TCG into agent mode with the agent
	// registered (1–3 min on two shared cores), or the initramfs agent's.
	bootDeadline = 15 * time.Minute
	// stepDeadline bounds a step of the agent's: a wipe, a power-off.
	stepDeadline = 5 * time.Minute

	// agentExtension is the name the factory knows Anvil's metal-agent extension by: the
	// provider's --agent-talos-extension-name default.
	agentExtension = "anvil-metal/metal-agent"

	// labKubernetes is the allocation's config's Kubernetes (none comes up: the lab has no
	// container images).
	labKubernetes = "1.32.0"
)

// What real Talos prints on the serial console that the test reads.
var (
	// extensionRe is Talos' init layering an extension over its rootfs.
	extensionRe = regexp.MustCompile(`enabling system extension (\S+) (\S+)`)
	// agentModeRe is machined's startup naming the runtime mode: metal-agent when the
	// metal-agent flag file is there.
	agentModeRe = regexp.MustCompile(`platform information.*"mode": "metal-agent"`)
	metalModeRe = regexp.MustCompile(`platform information.*"mode": "metal"[^-]`)
	schematicRe = regexp.MustCompile(`allocation (\S+), schematic (\S+)\)`)
)

// TestE2EAgentModeTalos: the agent as a Talos extension on real Talos (make talos), the
// path the established provider (siderolabs/omni-infra-provider-bare-metal) boots its
// agent by, on a lab of its own: the provider with --agent-talos-version, the factory
// stand-in laying make agent-extension's image over real Talos for the agent's
// schematic, one BIOS machine of 2 GiB with the lab's power API as its BMC.
//
//  1. It PXE-boots real Talos: Talos' init enables the extensions schematic and
//     metal-agent, machined says agent mode, the agent (an extension service) registers
//     with its inventory and says it cannot kexec.
//  2. Accepted, the agent wipes its disk (the erase report); the provider powers the idle
//     machine off through its BMC.
//  3. Allocated with real Talos' version and a config made with Talos' machinery, the
//     provider powers it on through its BMC into real Talos (not in agent mode), which
//     installs itself; Anvil marks it installed from Talos' events. No kexec is ordered.
//  4. The provider without --agent-talos-version: a second machine boots Anvil's own
//     agent initramfs on the same lab, for the boot time beside agent-mode Talos'.
//
// Figures in _out/e2e/agent-mode-report.txt.
func TestE2EAgentModeTalos(tt *testing.T) {
	t := labtest.Recording(tt)

	labtest.RequireHost(t)

	root := labtest.RepoRoot(t)
	talos := labtest.TalosAssets(t, root)
	layout := labtest.AgentExtension(t, root)

	bin := t.TempDir()
	bins := labtest.BuildPrograms(t, root, bin)
	provider, factory, power, anvilctl, agent := bins.Provider, bins.Factory, bins.Power, bins.Anvilctl, bins.Agent

	dir, prefix := labtest.NewLab(t, "anam", nil)

	siteArgs := []string{"--talos-kernel-args", labtest.TalosKernelArgs}

	cfg := lab.Config{
		Dir: dir, Prefix: prefix, Machines: 1,
		Firmware: []labmachine.Firmware{labmachine.BIOS},
		BMC:      []lab.PowerOwner{lab.OwnerAPI},
		// Real Talos needs 2 GiB; one vCPU, as its kernel's text patching under TCG
		// with two sometimes hangs or panics it as it boots.
		MemoryMB: 2048, CPUs: 1,
		PowerBin: power, ProviderBin: provider, AgentAssetsDir: agent,
		FactoryURL: "http://" + lab.FactoryListen, FactoryPXEURL: "http://" + lab.FactoryListen,
		FactoryBin: factory, TalosAssetsDir: talos.Dir,
		FactoryExtensions: map[string]string{agentExtension: layout},
		ProviderArgs:      append([]string{"--agent-talos-version", talos.Version}, siteArgs...),
		APIPort:           50042,
	}

	state, err := lab.Up(t.Context(), cfg)
	require.NoError(t, err)

	ctl := labtest.Anvilctl(anvilctl, state.ControlSocket())
	m := state.MachineList()[0]
	fig := &figures{}

	// 1. Real Talos in agent mode; the agent registers.
	var agentSchematic string

	t.Run("agent-mode Talos registers", func(t labtest.T) {
		poweredOn, err := labtest.PoweredOn(m)
		require.NoError(t, err)

		registered(t, ctl, m, &fig.agentModeRegistered, poweredOn)

		log := serial(m)

		// Talos' init names the layers last first (an earlier one overlays a later one): the
		// factory's order is the schematic meta-extension, then the agent.
		exts := enabledExtensions(log)
		require.Len(t, exts, 2, "Talos' init enabled the schematic and the agent: %v", exts)
		assert.Equal(t, "metal-agent", exts[0][0], "Anvil's agent extension")
		assert.Equal(t, "schematic", exts[1][0], "the schematic meta-extension")

		agentSchematic = exts[1][1]
		assert.Regexp(t, agentModeRe, log, "machined runs in agent mode")
		assert.Contains(t, log, "anvil.provider=10.77.0.1:50042", "the agent's arguments on the kernel line")

		// The provider booted it from its cache: the agent's schematic is there.
		out, err := ctl("cache", "list")
		assert.NoError(t, err, out)
		assert.Contains(t, out, agentSchematic)

		// The agent said it cannot kexec: no kexec, whatever the mode (the machine's status
		// has it a moment after its inventory).
		labtest.Eventually(t, stepDeadline, m.Name+": its agent cannot kexec", func() error {
			out, err := ctl("get", "machine", m.UUID, "-o", "yaml")
			if err != nil || !strings.Contains(out, "agentKexecUnavailable: ") {
				return fmt.Errorf("no agentKexecUnavailable (%v): %s", err, out)
			}

			out, err = ctl("get", "machines", "-o", "wide")
			if err != nil || !strings.Contains(out, "(agent cannot)") {
				return fmt.Errorf("no KEXEC '(agent cannot)' (%v): %s", err, out)
			}

			return nil
		})
	})

	if t.Failed() {
		return
	}

	// 2. Accepted and wiped by the agent under Talos; then powered off, idle.
	t.Run("wiped", func(t labtest.T) {
		accepted := time.Now()

		out, err := ctl("machine", "accept", m.UUID)
		require.NoError(t, err, out)

		wiped := regexp.MustCompile(`(?s)lastWipe:.*device: vda.*verified:`)

		if labtest.Eventually(t, stepDeadline, m.Name+"'s erase report", func() error {
			out, err := ctl("get", "machine", m.UUID, "-o", "yaml")
			if err != nil {
				return fmt.Errorf("%w: %s", err, out)
			}

			if !wiped.MatchString(out) {
				return fmt.Errorf("no wipe of vda reported")
			}

			return nil
		}) {
			fig.wiped = time.Since(accepted)
		}

		labtest.Eventually(t, stepDeadline, m.Name+" powered off, idle", func() error {
			if state.Power(m).Running() {
				return fmt.Errorf("still on")
			}

			return nil
		})
	})

	if t.Failed() {
		return
	}

	// 3. Allocated: through its BMC into real Talos, installed.
	t.Run("allocated and installed", func(t labtest.T) {
		before := len(serial(m))

		// The allocation's schematic, as the provider builds it without extensions: the
		// site's Talos kernel arguments. Its installer is the factory's for it.
		var sc schematic.Schematic

		sc.Customization.ExtraKernelArgs = strings.Fields(labtest.TalosKernelArgs)
		sc.Customization.SystemExtensions.OfficialExtensions = []string{}

		id, err := sc.ID()
		require.NoError(t, err)

		configFile := filepath.Join(t.TempDir(), "worker.yaml")
		require.NoError(t, os.WriteFile(configFile, talosConfig(t, lab.FactoryListen+"/metal-installer/"+id+":"+talos.Version), 0o600))

		allocated := time.Now()

		out, err := ctl("machine", "allocate", m.UUID, "--talos-version", talos.Version, "--no-detected-extensions", "--config", configFile)
		require.NoError(t, err, out)

		sm := schematicRe.FindStringSubmatch(out)
		require.NotNil(t, sm, "no allocation and schematic in: %s", out)
		require.Equal(t, id, sm[2], "the allocation's schematic is the one the config's installer names")

		allocation := sm[1]
		installed := fmt.Sprintf(labtest.TalosInstalledFmt, talos.Version)

		if labtest.Eventually(t, labtest.TalosDeadline, m.Name+" installed by Talos' installer, marked installed", func() error {
			log := serial(m)
			if len(log) < before || !strings.Contains(log[before:], installed) {
				return fmt.Errorf("no %q on the console since the allocation", installed)
			}

			out, err := ctl("get", "machine", m.UUID, "-o", "yaml")
			if err != nil {
				return fmt.Errorf("%w: %s", err, out)
			}

			if !regexp.MustCompile(`installedAllocation: "?` + regexp.QuoteMeta(allocation)).MatchString(out) {
				return fmt.Errorf("not marked installed")
			}

			return nil
		}) {
			fig.installed = time.Since(allocated)
		}

		// Powered on through its BMC after the allocation, into the allocation's Talos,
		// not in agent mode.
		poweredOn, err := labtest.PoweredOn(m)
		if assert.NoError(t, err) {
			assert.True(t, poweredOn.After(allocated), "powered on by its BMC after the allocation (%s, allocated %s)", poweredOn, allocated)
		}

		log := serial(m)
		if assert.GreaterOrEqual(t, len(log), before) {
			log = log[before:]
		}

		exts := enabledExtensions(log)
		if assert.NotEmpty(t, exts, "Talos' init after the allocation") {
			assert.Equal(t, []string{"schematic", id}, exts[len(exts)-1], "the allocation's schematic")

			for _, e := range exts {
				assert.NotEqual(t, "metal-agent", e[0], "no agent after the allocation")
			}
		}

		assert.Regexp(t, metalModeRe, log, "machined runs in metal mode, not agent mode")
		assert.NotRegexp(t, agentModeRe, log)

		b, err := os.ReadFile(state.ProviderLog())
		if assert.NoError(t, err) {
			assert.NotContains(t, string(b), `"order": "kexec-`, "no kexec ordered to an agent under Talos")
		}
	})

	// 4. Anvil's own agent on the same lab, for the boot time: the provider without
	// --agent-talos-version, a second machine like the first. The first is powered off
	// first, so that the second boots alone as the first did.
	t.Run("Anvil's agent initramfs on the same lab", func(t labtest.T) {
		out, err := ctl("machine", "power", "off", m.UUID)
		require.NoError(t, err, out)

		labtest.Eventually(t, stepDeadline, m.Name+" powered off", func() error {
			if state.Power(m).Running() {
				return fmt.Errorf("still on")
			}

			return nil
		})

		plain := cfg
		plain.ProviderArgs = siteArgs

		require.NoError(t, state.RestartProvider(t.Context(), plain))

		second, err := state.AddMachine(t.Context(), lab.MachineConfig{Firmware: labmachine.BIOS, MemoryMB: 2048, BMC: lab.OwnerAPI})
		require.NoError(t, err)

		poweredOn, err := labtest.PoweredOn(second)
		require.NoError(t, err)

		registered(t, ctl, second, &fig.initramfsRegistered, poweredOn)

		assert.Empty(t, enabledExtensions(serial(second)), "Anvil's initramfs: no Talos")
		fig.second = second.Name
	})

	fig.write(t, root, m.Name)
}

// registered waits for the machine to register with its inventory, and keeps the time
// from its power-on.
func registered(t labtest.T, ctl func(...string) (string, error), m *labmachine.Machine, took *time.Duration, poweredOn time.Time) {
	t.Helper()

	var yaml string

	if !labtest.Eventually(t, bootDeadline, m.Name+" registered with its inventory", func() error {
		out, err := ctl("get", "machine", m.UUID, "-o", "yaml")
		if err != nil {
			return fmt.Errorf("%w: %s", err, out)
		}

		if !strings.Contains(out, "name: vda") || !strings.Contains(out, m.Serial) {
			return fmt.Errorf("not registered with its disk and serial yet")
		}

		yaml = out

		return nil
	}) {
		t.FailNow()
	}

	*took = time.Since(poweredOn)
	t.Logf("%s: power-on → registered %s", m.Name, took.Round(100*time.Millisecond))

	assert.Contains(t, yaml, "uuid: "+m.UUID)
	assert.Contains(t, yaml, "manufacturer: "+m.Vendor.Manufacturer)
	assert.Contains(t, yaml, "driver: virtio_net")
	assert.Contains(t, yaml, "size: 8589934592", "the 8 GiB disk")
}

// serial is the machine's serial console so far.
func serial(m *labmachine.Machine) string {
	// A console not written yet reads as empty.
	b, _ := os.ReadFile(m.SerialLog())

	return string(b)
}

// enabledExtensions are the extensions Talos' init enabled in log, in order: name and
// version.
func enabledExtensions(log string) [][]string {
	var out [][]string

	for _, m := range extensionRe.FindAllStringSubmatch(log, -1) {
		out = append(out, []string{m[1], m[2]})
	}

	return out
}

// talosConfig is the allocation's machine config, made with Talos' machinery for Talos
// 1.13: a worker installing to /dev/vda from installImage, the factory stand-in's
// registry as a mirror of itself over plain HTTP, no time sync (the lab has no NTP
// server: Talos would wait for one), no discovery service.
func talosConfig(t testing.TB, installImage string) []byte {
	t.Helper()

	in, err := generate.NewInput("agent-mode", "https://10.77.0.1:6443", labKubernetes,
		generate.WithVersionContract(config.TalosVersion1_13),
		generate.WithInstallDisk("/dev/vda"),
		generate.WithInstallImage(installImage),
		generate.WithRegistryMirror(lab.FactoryListen, "http://"+lab.FactoryListen),
		generate.WithClusterDiscovery(false))
	require.NoError(t, err)

	cfg, err := in.Config(machine.TypeWorker)
	require.NoError(t, err)

	patch, err := configpatcher.LoadPatch([]byte("machine:\n  time:\n    disabled: true\n"))
	require.NoError(t, err)

	out, err := configpatcher.Apply(configpatcher.WithConfig(cfg), []configpatcher.Patch{patch})
	require.NoError(t, err)

	patched, err := out.Config()
	require.NoError(t, err)

	b, err := patched.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
	require.NoError(t, err)

	return b
}

// figures are the test's times.
type figures struct {
	agentModeRegistered, initramfsRegistered time.Duration
	wiped, installed                         time.Duration
	second                                   string
}

// write prints the figures and writes them to _out/e2e/agent-mode-report.txt.
func (f *figures) write(t labtest.T, root, first string) {
	t.Helper()

	d := func(v time.Duration) string {
		if v == 0 {
			return "—"
		}

		return fmt.Sprintf("%6.1f s", v.Seconds())
	}

	var b strings.Builder

	fmt.Fprintf(&b, "The agent as a Talos extension on real Talos, beside Anvil's agent initramfs %s (TCG, %d CPUs, one BIOS machine of 2 GiB at a time)\n\n",
		time.Now().UTC().Format(time.RFC3339), runtime.NumCPU())
	fmt.Fprintf(&b, "%-52s %-8s %s\n", "power-on → registered, agent-mode Talos", first, d(f.agentModeRegistered))
	fmt.Fprintf(&b, "%-52s %-8s %s\n", "power-on → registered, Anvil's agent initramfs", f.second, d(f.initramfsRegistered))

	if f.agentModeRegistered > 0 && f.initramfsRegistered > 0 {
		fmt.Fprintf(&b, "%-52s %-8s %6.1f×\n", "agent-mode Talos / the initramfs", "", f.agentModeRegistered.Seconds()/f.initramfsRegistered.Seconds())
	}

	fmt.Fprintf(&b, "%-52s %-8s %s\n", "accept → wiped (agent-mode Talos)", first, d(f.wiped))
	fmt.Fprintf(&b, "%-52s %-8s %s\n", "allocation → installed (through the BMC, no kexec)", first, d(f.installed))

	t.Log(b.String())

	out := filepath.Join(root, "_out", "e2e", "agent-mode-report.txt")
	if assert.NoError(t, os.MkdirAll(filepath.Dir(out), 0o755)) {
		assert.NoError(t, os.WriteFile(out, []byte(b.String()), 0o644))
	}
}
