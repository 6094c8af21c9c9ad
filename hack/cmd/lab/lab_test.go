package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/hack/internal/lab"
	"github.com/anvil-metal/anvil/hack/internal/labnet"
	"github.com/anvil-metal/anvil/hack/internal/proc"
)

// registerDeadline is generous: under TCG power-on to the agent is ~15–20 s, and the
// machine is shared with other tests.
const registerDeadline = 5 * time.Minute

// TestLabSmoke runs a lab of its own beside any running lab: a BIOS machine (SeaBIOS +
// iPXE ROM) and a UEFI machine (OVMF + iPXE ROM) PXE-boot in parallel — the site
// dnsmasq gives the address, the provider's ProxyDHCP the boot script — and their agents
// register with their MAC and inventory. Nothing is left behind, pass or fail.
func TestLabSmoke(t *testing.T) {
	requireLabHost(t)

	root := repoRoot(t)
	bin := t.TempDir()
	labBin, provider, anvilctl := filepath.Join(bin, "lab"), filepath.Join(bin, "provider"), filepath.Join(bin, "anvilctl")

	goBuild(t, root, labBin, "./hack/cmd/lab")
	goBuild(t, root, provider, "./provider/cmd/provider")
	goBuild(t, root, anvilctl, "./provider/cmd/anvilctl")

	assets := agentAssets(t, root, bin)

	dir := filepath.Join(t.TempDir(), "lab")
	prefix := fmt.Sprintf("anvt%d", os.Getpid()%100000)

	runLab := func(args ...string) (string, error) {
		cmd := exec.Command(labBin, append([]string{"--dir", dir, "--prefix", prefix}, args...)...)
		out, err := cmd.CombinedOutput()

		return string(out), err
	}

	// Registered after the temporary directories, so it runs before they are removed.
	t.Cleanup(func() {
		if t.Failed() {
			dumpLogs(t, dir)
		}

		out, err := runLab("down")
		assert.NoError(t, err, "lab down: %s", out)

		namespaces, err := labnet.ListNamespaces(context.Background())
		assert.NoError(t, err)

		for _, ns := range namespaces {
			assert.False(t, strings.HasPrefix(ns, prefix+"-"), "namespace %s is left behind", ns)
		}

		assert.Empty(t, proc.FindByArg(dir+"/"), "processes of the lab are left behind")
	})

	// ANVIL_LAB_SMOKE_FIRMWARE=bios,uefi,uefi-pxe adds the firmware's own PXE (slower:
	// three TCG machines on a small host).
	firmware := os.Getenv("ANVIL_LAB_SMOKE_FIRMWARE")
	if firmware == "" {
		firmware = "bios,uefi"
	}

	out, err := runLab("up", "--machines", fmt.Sprint(len(strings.Split(firmware, ","))), "--firmware", firmware,
		"--provider-bin", provider, "--agent-assets-dir", assets, "--factory=false") // hack/e2e runs the factory
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

func requireLabHost(t *testing.T) {
	t.Helper()

	if os.Geteuid() != 0 {
		t.Skip("the lab needs root (network namespaces, taps, ports 67/69)")
	}

	for _, tool := range []string{"ip", "dnsmasq", "qemu-system-x86_64", "qemu-img"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (make setup installs it)", tool)
		}
	}
}

func repoRoot(t *testing.T) string {
	t.Helper()

	_, file, _, _ := runtime.Caller(0)

	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

func goBuild(t *testing.T, root, out, pkg string) {
	t.Helper()

	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")

	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "building %s: %s", pkg, b)
}

// agentAssets is _out/agent when make agent-initramfs has run, else assets built here.
func agentAssets(t *testing.T, root, bin string) string {
	t.Helper()

	made := filepath.Join(root, "_out", "agent")
	if initramfs, _ := filepath.Glob(filepath.Join(made, "initramfs-amd64.*")); len(initramfs) > 0 {
		if _, err := os.Stat(filepath.Join(made, "vmlinuz-amd64")); err == nil {
			return made
		}
	}

	agent := filepath.Join(bin, "metal-agent")
	goBuild(t, root, agent, "./agent/cmd/metal-agent")

	out := filepath.Join(bin, "agent")
	cmd := exec.Command("go", "run", "./imager/cmd/imager", "--agent", agent, "--out", out, "--zstd-level", "3")
	cmd.Dir = root

	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "building the agent's boot assets: %s", b)

	return out
}

func dumpLogs(t *testing.T, dir string) {
	t.Helper()

	logs, _ := filepath.Glob(filepath.Join(dir, "machines", "*", "serial.log"))
	logs = append(logs, filepath.Join(dir, "provider.log"), filepath.Join(dir, "dnsmasq.log"))

	for _, l := range logs {
		b, err := os.ReadFile(l)
		if err != nil {
			t.Logf("%s: %v", l, err)

			continue
		}

		// Drop the terminal escapes iPXE writes, which make the log unreadable.
		t.Logf("%s:\n%s", l, bytes.ReplaceAll(b, []byte("\x1b"), []byte("^[")))
	}
}
