//go:build lab

package omnicluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/hack/internal/diskimage"
	"github.com/anvil-metal/anvil/hack/internal/lab"
	"github.com/anvil-metal/anvil/hack/internal/labtest"
	"github.com/anvil-metal/anvil/hack/internal/machine"
)

// standinTalos is the stand-in Talos' version the factory stand-in offers.
const standinTalos = "v1.9.0"

// TestOmniAdoption switches a provider with standalone state to Omni mode under an
// installed machine: a machine accepted, allocated and installed locally, its Talos on
// its disk, the provider restarted as Omni's infra provider. The machine keeps its
// allocation and boots its disk, which is byte-identical afterwards; Omni's transitions
// are refused locally, naming Omni.
func TestOmniAdoption(tt *testing.T) {
	t := labtest.Recording(tt)

	labtest.RequireHost(t)

	root := labtest.RepoRoot(t)
	omniBin, omnictlBin := labtest.OmniBinaries(t, root)

	bin := t.TempDir()
	factory, anvilctl := filepath.Join(bin, "lab-factory"), filepath.Join(bin, "anvilctl")

	provider := labtest.BuildProvider(t, root, bin)
	labtest.GoBuild(t, root, factory, "./hack/cmd/lab-factory")
	labtest.GoBuild(t, root, anvilctl, "./provider/cmd/anvilctl")

	agent := labtest.AgentAssets(t, root, bin)

	standin := filepath.Join(bin, "talos-standin")
	require.NoError(t, lab.BuildStandinAssets(t.Context(), root, standin))

	diskInit := filepath.Join(bin, "disk-init")
	require.NoError(t, diskimage.BuildInit(t.Context(), diskInit))

	dir, prefix := labtest.NewLab(t, "anva", nil)

	// Standalone first: no Omni, and the lab powers the machine (no BMC).
	cfg := lab.Config{
		Dir: dir, Prefix: prefix, Machines: 1, Firmware: []machine.Firmware{machine.BIOS},
		ProviderBin: provider, AgentAssetsDir: agent,
		FactoryURL: "http://" + lab.FactoryListen, FactoryPXEURL: "http://" + lab.FactoryListen,
		FactoryBin: factory, FactoryAssetsDir: standin,
		APIPort: 50042,
	}

	state, err := lab.Up(t.Context(), cfg)
	require.NoError(t, err)

	ctl := labtest.Anvilctl(anvilctl, state.ControlSocket())
	m := state.MachineList()[0]

	yaml := func() string {
		out, err := ctl("get", "machine", m.UUID, "-o", "yaml")
		if err != nil {
			return ""
		}

		return out
	}

	// Accepted, wiped, allocated and installed, locally.
	require.True(t, labtest.Eventually(t, stepDeadline, m.Name+" registered", func() error {
		_, err := ctl("get", "machine", m.UUID)

		return err
	}))

	out, err := ctl("machine", "accept", m.UUID)
	require.NoError(t, err, out)

	require.True(t, labtest.Eventually(t, stepDeadline, m.Name+" wiped", func() error {
		if !strings.Contains(yaml(), "lastWipe:") {
			return os.ErrNotExist
		}

		return nil
	}))

	config := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(config, []byte("version: v1alpha1\nmachine:\n  type: worker\n  token: adoption\n"), 0o600))

	out, err = ctl("machine", "allocate", m.UUID, "--talos-version", standinTalos, "--config", config)
	require.NoError(t, err, out)

	require.True(t, labtest.Eventually(t, labtest.TalosDeadline, m.Name+" installed", func() error {
		if !strings.Contains(yaml(), "installedAllocation:") {
			return os.ErrNotExist
		}

		return nil
	}))

	allocation := allocationOf(yaml())
	require.NotEmpty(t, allocation)

	// Omni mode: the lab's Omni up, the provider restarted as its infra provider (the
	// machine still running, so that the lab leaves its power alone).
	cfg.OmniBin, cfg.OmnictlBin = omniBin, omnictlBin

	state, err = lab.Up(t.Context(), cfg)
	require.NoError(t, err)
	require.NoError(t, state.RestartProvider(t.Context(), cfg))

	log, err := os.ReadFile(state.ProviderLog())
	require.NoError(t, err)
	require.Contains(t, string(log), `"omni":"https://`, "the provider runs in Omni mode")

	// Its Talos on its disk, as the installer leaves it (the lab's disk system).
	require.NoError(t, m.Stop(t.Context()))
	require.NoError(t, diskimage.Make(t.Context(), m.Disk(), diskimage.Options{
		Machine: m.Name, Init: diskInit, Format: diskimage.QCOW2, Size: 8 << 30,
	}))

	before := fileSum(t, m.Disk())

	// The machine boots its disk, under the allocation it had.
	require.NoError(t, m.Start(t.Context()))

	assert.True(t, labtest.Eventually(t, stepDeadline, m.Name+" booted from its disk", func() error {
		b, _ := os.ReadFile(m.SerialLog())
		if !strings.Contains(string(b), diskimage.Line(m.Name)) {
			return os.ErrNotExist
		}

		return nil
	}))

	// The disk system powers the machine off once it has said so.
	assert.True(t, labtest.Eventually(t, stepDeadline, m.Name+" off", func() error {
		if m.Running() {
			return os.ErrExist
		}

		return nil
	}))

	after := yaml()
	assert.Contains(t, after, "lastDecision: disk")
	assert.Equal(t, allocation, allocationOf(after), "the local allocation is kept")
	assert.Equal(t, before, fileSum(t, m.Disk()), "the installed machine's disk is byte-identical")

	// What Omni owns is refused locally, saying who owns it.
	out, err = ctl("machine", "reject", m.UUID)
	assert.Error(t, err)
	assert.Contains(t, out+errString(err), "managed by Omni at")
}

// allocationOf is the allocation ID in a machine's anvilctl YAML.
func allocationOf(yaml string) string {
	for line := range strings.SplitSeq(yaml, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "installedAllocation:"); ok {
			return strings.Trim(strings.TrimSpace(v), `"`)
		}
	}

	return ""
}

func errString(err error) string {
	if err == nil {
		return ""
	}

	return err.Error()
}
