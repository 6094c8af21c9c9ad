package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/siderolabs/image-factory/pkg/schematic"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// binaries built once for the tests in this package.
var bin struct{ provider, anvilctl string }

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "anvil-provider-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}

	bin.provider = filepath.Join(dir, "provider")
	bin.anvilctl = filepath.Join(dir, "anvilctl")

	for out, pkg := range map[string]string{bin.provider: ".", bin.anvilctl: "../anvilctl"} {
		if b, err := exec.Command("go", "build", "-o", out, pkg).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "error building %s: %v\n%s", pkg, err, b)
			os.RemoveAll(dir) //nolint:errcheck
			os.Exit(1)
		}
	}

	code := m.Run()

	os.RemoveAll(dir) //nolint:errcheck
	os.Exit(code)
}

// provider is a provider process on loopback, on ports of its own.
type provider struct {
	t        *testing.T
	stateDir string
	args     []string
	httpURL  string
	cmd      *exec.Cmd
	log      *bytes.Buffer
	factory  *fakeFactory
}

func freePort(t *testing.T, network string) int {
	t.Helper()

	switch network {
	case "udp":
		c, err := net.ListenPacket("udp4", "127.0.0.1:0")
		require.NoError(t, err)
		defer c.Close() //nolint:errcheck

		return c.LocalAddr().(*net.UDPAddr).Port
	default:
		l, err := net.Listen("tcp4", "127.0.0.1:0")
		require.NoError(t, err)
		defer l.Close() //nolint:errcheck

		return l.Addr().(*net.TCPAddr).Port
	}
}

// fakeFactory is an Image Factory stand-in on loopback: it registers schematics.
type fakeFactory struct {
	mu         sync.Mutex
	schematics []string
}

func (f *fakeFactory) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/schematics" {
		http.NotFound(w, r)

		return
	}

	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)

		return
	}

	sc, err := schematic.Unmarshal(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)

		return
	}

	id, err := sc.ID()
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)

		return
	}

	f.mu.Lock()
	f.schematics = append(f.schematics, id)
	f.mu.Unlock()

	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]string{"id": id, "schematic": string(body)}) //nolint:errcheck
}

func (f *fakeFactory) registered() []string {
	f.mu.Lock()
	defer f.mu.Unlock()

	return slices.Clone(f.schematics)
}

func newProvider(t *testing.T) *provider {
	t.Helper()

	httpPort := freePort(t, "tcp")
	factory := httptest.NewServer(&fakeFactory{})
	t.Cleanup(factory.Close)
	p := &provider{
		t:        t,
		stateDir: t.TempDir(),
		httpURL:  fmt.Sprintf("http://127.0.0.1:%d", httpPort),
	}

	p.args = []string{
		"--state-dir", p.stateDir,
		"--api-advertise-address", "127.0.0.1",
		"--api-listen-address", "127.0.0.1",
		"--api-port", fmt.Sprint(httpPort),
		"--dhcp-proxy-iface-or-ip", "lo",
		"--dhcp-port", fmt.Sprint(freePort(t, "udp")),
		"--dhcp-boot-server-port", fmt.Sprint(freePort(t, "udp")),
		"--tftp-listen-address", fmt.Sprintf("127.0.0.1:%d", freePort(t, "udp")),
		"--tftp-root", t.TempDir(),
		"--agent-assets-dir", t.TempDir(),
		"--machine-labels", "dc=lab,rack=r1",
		"--control-listen-address", fmt.Sprintf("127.0.0.1:%d", freePort(t, "tcp")),
		"--image-factory-base-url", factory.URL,
	}
	p.factory = factory.Config.Handler.(*fakeFactory)

	t.Cleanup(func() {
		p.kill()

		if t.Failed() {
			t.Logf("provider log:\n%s", p.log)
		}
	})

	return p
}

func (p *provider) start() {
	p.t.Helper()

	if p.log == nil {
		p.log = &bytes.Buffer{}
	}

	p.cmd = exec.Command(bin.provider, p.args...)
	p.cmd.Stdout = p.log
	p.cmd.Stderr = p.log
	require.NoError(p.t, p.cmd.Start())

	require.Eventually(p.t, func() bool {
		resp, err := http.Get(p.httpURL + "/healthz")
		if err != nil {
			return false
		}

		resp.Body.Close() //nolint:errcheck

		_, err = os.Stat(filepath.Join(p.stateDir, "control.sock"))

		return resp.StatusCode == http.StatusOK && err == nil
	}, 30*time.Second, 50*time.Millisecond, "provider did not come up")
}

// kill ends the provider without a chance to clean up, as a power loss would.
func (p *provider) kill() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}

	p.cmd.Process.Signal(syscall.SIGKILL) //nolint:errcheck
	p.cmd.Wait()                          //nolint:errcheck
	p.cmd = nil
}

func (p *provider) anvilctl(args ...string) (string, error) {
	p.t.Helper()

	ctx, cancel := context.WithTimeout(p.t.Context(), 30*time.Second)
	defer cancel()

	cmd := exec.CommandContext(ctx, bin.anvilctl, append([]string{"--endpoint", "unix://" + filepath.Join(p.stateDir, "control.sock")}, args...)...)
	out, err := cmd.CombinedOutput()

	return string(out), err
}

func (p *provider) mustAnvilctl(args ...string) string {
	p.t.Helper()

	out, err := p.anvilctl(args...)
	require.NoError(p.t, err, "anvilctl %v: %s", args, out)

	return out
}

func (p *provider) bootScript(uuid string) (int, string) {
	p.t.Helper()

	resp, err := http.Get(p.httpURL + "/ipxe/boot.ipxe?uuid=" + uuid + "&mac=52-54-00-00-00-01&arch=x86_64&platform=efi")
	require.NoError(p.t, err)

	defer resp.Body.Close() //nolint:errcheck

	body, err := io.ReadAll(resp.Body)
	require.NoError(p.t, err)

	return resp.StatusCode, string(body)
}

const uuid = "4c4c4544-0000-1000-8000-0000000000a1"

// TestAnvilctlAgainstRunningProvider walks a machine through its life with anvilctl, and
// kills the provider (SIGKILL) between steps: what it acknowledged survives.
func TestAnvilctlAgainstRunningProvider(t *testing.T) {
	t.Parallel()

	p := newProvider(t)
	p.start()

	out := p.mustAnvilctl("get", "machines")
	assert.NotContains(t, out, uuid, "the provider starts knowing no machines")

	code, script := p.bootScript(uuid)
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, script, "no agent boot assets", "unknown machines are sent to the agent")

	require.Eventually(t, func() bool {
		out, err := p.anvilctl("get", "machines")

		return err == nil && strings.Contains(out, uuid)
	}, 30*time.Second, 100*time.Millisecond, "the machine was not recorded")

	out, err := p.anvilctl("machine", "allocate", uuid, "--talos-version", "v1.9.0")
	require.Error(t, err, "a pending machine cannot be allocated")
	assert.Contains(t, out, "pending")

	out, err = p.anvilctl("machine", "accept", "4c4c4544-0000-1000-8000-00000000dead")
	require.Error(t, err)
	assert.Contains(t, out, "not known")

	// Acceptance owes a wipe: the machine goes on booting the agent, allocated or not.
	p.mustAnvilctl("machine", "accept", uuid)
	p.mustAnvilctl("machine", "allocate", uuid, "--talos-version", "v1.9.0")
	p.kill()
	p.start()

	code, script = p.bootScript(uuid)
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, script, "no agent boot assets", "a machine that owes its initial wipe boots the agent")

	p.mustAnvilctl("machine", "deallocate", uuid)

	// A second machine, accepted as holding nothing, is ready at once.
	const uuid = "4c4c4544-0000-1000-8000-0000000000b2"

	p.bootScript(uuid)
	require.Eventually(t, func() bool {
		_, err := p.anvilctl("get", "machine", uuid)

		return err == nil
	}, 30*time.Second, 100*time.Millisecond, "the machine was not recorded")

	p.mustAnvilctl("machine", "accept", uuid, "--skip-wipe")
	p.kill()
	p.start()

	configFile := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(configFile, []byte("version: v1alpha1\nmachine:\n  type: worker\n"), 0o600))

	p.mustAnvilctl("machine", "allocate", uuid, "--talos-version", "v1.9.0", "--extensions", "siderolabs/intel-ucode", "--config", configFile)
	p.kill()
	p.start()

	code, script = p.bootScript(uuid)
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, script, "chain --replace https://pxe.factory.talos.dev/pxe/")
	assert.Contains(t, script, "/v1.9.0/metal-amd64")

	// The schematic the script chains to is registered with the factory.
	schematicID := script[strings.Index(script, "/pxe/")+len("/pxe/"):]
	schematicID = schematicID[:strings.IndexByte(schematicID, '/')]

	require.Eventually(t, func() bool { return slices.Contains(p.factory.registered(), schematicID) },
		30*time.Second, 100*time.Millisecond, "the schematic was not registered with the factory")
	assert.Contains(t, p.mustAnvilctl("get", "schematics"), schematicID)

	// The metadata server hands the config to the token in the machine's own script.
	tok := script[strings.Index(script, "set anvil_token ")+len("set anvil_token "):]
	tok = tok[:strings.IndexByte(tok, '\n')]

	resp, err := http.Get(p.httpURL + "/metadata/" + uuid + "?token=" + tok)
	require.NoError(t, err)

	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close() //nolint:errcheck
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "version: v1alpha1\nmachine:\n  type: worker\n", string(body))

	p.mustAnvilctl("machine", "installed", uuid)
	p.kill()
	p.start()

	code, script = p.bootScript(uuid)
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, script, "exit", "an installed machine boots from its disk")

	var machine map[string]any

	out = p.mustAnvilctl("get", "machine", uuid, "-o", "json")
	require.NoError(t, json.Unmarshal([]byte(out), &machine), out)
	assert.Contains(t, out, "v1.9.0")
	assert.Contains(t, out, "siderolabs/intel-ucode")
	assert.Contains(t, out, "52:54:00:00:00:01")
	assert.NotContains(t, out, "type: worker", "the machine config is not shown by default")

	out = p.mustAnvilctl("get", "machines", "-o", "yaml")
	assert.Contains(t, out, "rack: r1", "static machine labels are set")

	p.mustAnvilctl("machine", "deallocate", uuid)
	p.kill()
	p.start()

	code, script = p.bootScript(uuid)
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, script, "no agent boot assets", "a deallocated machine goes back to the agent to be wiped")
}

// TestControlOverTCP: the control API over TCP demands the admin client certificate.
func TestControlOverTCP(t *testing.T) {
	t.Parallel()

	p := newProvider(t)
	p.start()

	addr := p.args[slices.Index(p.args, "--control-listen-address")+1]
	tcp := func(extra ...string) (string, error) {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()

		args := append([]string{"--endpoint", "tcp://" + addr, "--ca-cert", filepath.Join(p.stateDir, "ca.crt")}, extra...)
		out, err := exec.CommandContext(ctx, bin.anvilctl, append(args, "get", "machines")...).CombinedOutput()

		return string(out), err
	}

	out, err := tcp("--cert", filepath.Join(p.stateDir, "admin.crt"), "--key", filepath.Join(p.stateDir, "admin.key"))
	require.NoError(t, err, out)
	assert.Contains(t, out, "ACCEPTANCE")

	out, err = tcp()
	require.Error(t, err, "no client certificate: %s", out)
}
