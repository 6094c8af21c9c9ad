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
