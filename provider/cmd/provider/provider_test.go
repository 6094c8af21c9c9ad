package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/anvil-metal/anvil/internal/labfactory"
	"github.com/anvil-metal/anvil/internal/testprovider"
)

// TestMain removes the provider binaries the tests built once they are done.
func TestMain(m *testing.M) { os.Exit(testprovider.Main(m)) }

const (
	uuid  = "4c4c4544-0000-1000-8000-0000000000a1"
	uuid2 = "4c4c4544-0000-1000-8000-0000000000b2"
	mac   = "52:54:00:00:00:01"
)

// restart kills the provider (SIGKILL, as a power loss would) and starts it again.
func restart(p *testprovider.Provider) {
	p.Kill()
	p.Start()
}

// TestAnvilctlAgainstRunningProvider walks machines through their life with anvilctl,
// killing the provider between steps: what it acknowledged survives.
func TestAnvilctlAgainstRunningProvider(t *testing.T) {
	t.Parallel()

	// The factory stand-in serves Talos boot assets (files that are not): the provider
	// boots Talos from its own cache of them.
	talos := t.TempDir()
	for name, content := range map[string]string{"kernel-amd64": "TALOS-KERNEL", "initramfs-amd64.xz": "TALOS-INITRAMFS"} {
		require.NoError(t, os.WriteFile(filepath.Join(talos, name), []byte(content), 0o600))
	}

	p := testprovider.NewWith(t, testprovider.Options{Factory: []labfactory.Option{labfactory.WithAssets(talos)}}, "--machine-labels", "dc=lab,rack=r1")
	p.Start()

	out := p.MustAnvilctl("get", "machines")
	assert.NotContains(t, out, uuid, "the provider starts knowing no machines")

	code, script := p.BootScript(uuid, mac)
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, script, "no agent boot assets", "unknown machines are sent to the agent")
	p.WaitMachine(uuid)

	out, err := p.Anvilctl("machine", "allocate", uuid, "--talos-version", "v1.9.0")
	require.Error(t, err, "a pending machine cannot be allocated")
	assert.Contains(t, out, "pending")

	out, err = p.Anvilctl("machine", "accept", "4c4c4544-0000-1000-8000-00000000dead")
	require.Error(t, err)
	assert.Contains(t, out, "not known")

	// Acceptance owes a wipe: the machine goes on booting the agent, allocated or not.
	p.MustAnvilctl("machine", "accept", uuid)
	p.MustAnvilctl("machine", "allocate", uuid, "--talos-version", "v1.9.0")
	restart(p)

	code, script = p.BootScript(uuid, mac)
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, script, "no agent boot assets", "a machine that owes its initial wipe boots the agent")

	p.MustAnvilctl("machine", "deallocate", uuid)

	// A second machine, accepted as holding nothing, with manual power (no BMC
	// credentials to provision), is ready at once.
	p.BootScript(uuid2, mac)
	p.WaitMachine(uuid2)
	p.MustAnvilctl("machine", "bmc", "set", uuid2, "--kind", "none")
	p.MustAnvilctl("machine", "accept", uuid2, "--skip-wipe")
	assert.Contains(t, p.MustAnvilctl("machine", "kexec", "never", uuid2), "kexec never")
	assert.NotContains(t, p.MustAnvilctl("machine", "kexec", "default", uuid2), "kexec")
	restart(p)

	configFile := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(configFile, []byte("version: v1alpha1\nmachine:\n  type: worker\n"), 0o600))

	p.MustAnvilctl("machine", "allocate", uuid2, "--talos-version", "v1.9.0", "--extensions", "siderolabs/intel-ucode", "--config", configFile)
	restart(p)

	// Talos boots from the provider's cache of the factory's assets for the schematic,
	// once the factory knows it (until then the script says to retry).
	require.Eventually(t, func() bool {
		code, script = p.BootScript(uuid2, mac)

		return code == http.StatusOK && strings.Contains(script, "/assets/talos/")
	}, 30*time.Second, 100*time.Millisecond, "no Talos boot from the cache")

	assert.Contains(t, script, "/v1.9.0/kernel-amd64 initrd=initramfs-amd64.xz talos.platform=metal")
	assert.NotContains(t, script, "${", "the kernel line carries the machine and its token, nothing for iPXE to expand")

	// The schematic the script boots is registered with the factory.
	schematicID := script[strings.Index(script, "/assets/talos/")+len("/assets/talos/"):]
	schematicID = schematicID[:strings.IndexByte(schematicID, '/')]

	assert.True(t, slices.Contains(p.Factory.Registered(), schematicID), "the schematic was not registered with the factory")
	assert.Contains(t, p.MustAnvilctl("get", "schematics"), schematicID)
	assert.Contains(t, p.MustAnvilctl("cache", "list"), schematicID, "the assets are in the cache")

	kernel, err := http.Get(p.HTTPURL + "/assets/talos/" + schematicID + "/v1.9.0/kernel-amd64")
	require.NoError(t, err)

	body, _ := io.ReadAll(kernel.Body)
	kernel.Body.Close()
	assert.Equal(t, "TALOS-KERNEL", string(body), "the provider serves the factory's kernel")

	// The metadata server hands the config to the URL on the machine's own kernel line,
	// after the factory's cmdline.
	config := "talos.config=" + p.HTTPURL + "/metadata/" + uuid2 + "?token="
	require.Contains(t, script, config)

	tok := script[strings.Index(script, config)+len(config):]
	tok = tok[:strings.IndexAny(tok, " \n")]

	resp, err := http.Get(p.HTTPURL + "/metadata/" + uuid2 + "?token=" + tok)
	require.NoError(t, err)

	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "version: v1alpha1\nmachine:\n  type: worker\n", string(body))

	p.MustAnvilctl("machine", "installed", uuid2)
	restart(p)

	code, script = p.BootScript(uuid2, mac)
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, script, "exit", "an installed machine boots from its disk")

	var machine map[string]any

	out = p.MustAnvilctl("get", "machine", uuid2, "-o", "json")
	require.NoError(t, json.Unmarshal([]byte(out), &machine), out)
	assert.Contains(t, out, "v1.9.0")
	assert.Contains(t, out, "siderolabs/intel-ucode")
	assert.Contains(t, out, mac)
	assert.NotContains(t, out, "type: worker", "the machine config is not shown by default")

	out = p.MustAnvilctl("get", "machines", "-o", "yaml")
	assert.Contains(t, out, "rack: r1", "static machine labels are set")

	p.MustAnvilctl("machine", "deallocate", uuid2)
	restart(p)

	code, script = p.BootScript(uuid2, mac)
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, script, "no agent boot assets", "a deallocated machine goes back to the agent to be wiped")
}

// TestControlOverTCP: the control API over TCP demands the admin client certificate.
func TestControlOverTCP(t *testing.T) {
	t.Parallel()

	addr := fmt.Sprintf("127.0.0.1:%d", testprovider.FreePort(t, "tcp"))

	p := testprovider.New(t, false, "--control-listen-address", addr)
	p.Start()

	tcp := func(extra ...string) (string, error) {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()

		args := append([]string{"--endpoint", "tcp://" + addr, "--ca-cert", filepath.Join(p.StateDir, "ca.crt")}, extra...)
		out, err := exec.CommandContext(ctx, p.AnvilctlBinary(), append(args, "get", "machines")...).CombinedOutput()

		return string(out), err
	}

	out, err := tcp("--cert", filepath.Join(p.StateDir, "admin.crt"), "--key", filepath.Join(p.StateDir, "admin.key"))
	require.NoError(t, err, out)
	assert.Contains(t, out, "ACCEPTANCE")

	out, err = tcp()
	require.Error(t, err, "no client certificate: %s", out)
}

// TestBurstOfNewMachines: a burst of new machines booting at once, far more than the
// state keeps of events for its watchers (--state-history 8), does not take the
// provider down: it goes on serving, and what it serves follows the state.
func TestBurstOfNewMachines(t *testing.T) {
	t.Parallel()

	p := testprovider.New(t, true, "--state-history", "8")
	p.Start()

	const machines = 400

	id := func(i int) string { return fmt.Sprintf("4c4c4544-0000-1000-8000-%012d", 1000+i) }

	var eg errgroup.Group

	eg.SetLimit(8) // as many in flight as the benchmark's seeding

	for i := range machines {
		eg.Go(func() error {
			resp, err := http.Get(p.HTTPURL + "/ipxe/boot.ipxe?uuid=" + id(i) + "&mac=52-54-00-00-10-00&arch=x86_64&platform=efi")
			if err != nil {
				return err
			}

			defer resp.Body.Close()

			if _, err = io.Copy(io.Discard, resp.Body); err != nil {
				return err
			}

			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("machine %d: %s", i, resp.Status)
			}

			return nil
		})
	}

	require.NoError(t, eg.Wait())

	require.Eventually(t, func() bool {
		out, err := p.Anvilctl("get", "machines")

		return err == nil && strings.Count(out, "4c4c4544-0000-1000-8000-") == machines
	}, 60*time.Second, 200*time.Millisecond, "every machine is recorded")

	// What is served follows the state: a machine rejected now boots from its disk.
	p.MustAnvilctl("machine", "reject", id(machines-1))
	require.Eventually(t, func() bool {
		_, script := p.BootScript(id(machines-1), "52:54:00:00:10:00")

		return strings.Contains(script, "booting from disk")
	}, 30*time.Second, 100*time.Millisecond)

	resp, err := http.Get(p.HTTPURL + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)

	t.Logf("watch restarts: machine view %d, controllers %d",
		strings.Count(p.Log(), "machine view fell behind"), strings.Count(p.Log(), "controller runtime stopped"))
}

// TestOmniModeRefusesWhatOmniOwns: a provider in Omni mode, whose Omni cannot be
// reached yet, still starts; it refuses the transitions Omni owns, naming Omni, keeps
// labels local, and boots no agent that could not join Omni.
func TestOmniModeRefusesWhatOmniOwns(t *testing.T) {
	t.Parallel()

	unreachable := fmt.Sprintf("https://127.0.0.1:%d", testprovider.FreePort(t, "tcp"))

	p := testprovider.New(t, true, "--omni-api-endpoint", unreachable, "--id", "anvil-test")
	p.Args = append(p.Args, "--omni-service-account-key-file", writeKey(t))
	p.Start()

	code, script := p.BootScript(uuid, mac)
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, script, "waiting for Omni's join config", "no agent boots without Omni's join args")
	assert.NotContains(t, script, "anvil.token=")

	// The machine is known from its boot all the same.
	p.WaitMachine(uuid)

	out, err := p.Anvilctl("machine", "accept", uuid)
	require.Error(t, err)
	assert.Contains(t, out, "managed by Omni at "+unreachable)

	p.MustAnvilctl("machine", "label", uuid, "team=storage")
	assert.NotContains(t, p.Log(), "c2VjcmV0LWtleQ", "the service account key is never logged")

	// --auto-accept is refused at start: Omni owns acceptance.
	bad := testprovider.New(t, true, "--omni-api-endpoint", unreachable, "--auto-accept", "all")
	bad.Args = append(bad.Args, "--omni-service-account-key-file", writeKey(t))

	out2, err := exec.Command(bad.Binary(), bad.Args...).CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out2), "Omni owns acceptance")
}

func writeKey(t *testing.T) string {
	t.Helper()

	path := filepath.Join(t.TempDir(), "omni.key")
	require.NoError(t, os.WriteFile(path, []byte("c2VjcmV0LWtleQ==\n"), 0o600))

	return path
}
