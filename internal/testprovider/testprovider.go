// Package testprovider runs the provider binary on loopback for tests: built once per
// test binary, on ports of its own, with an Image Factory stand-in, anvilctl beside it,
// and its log printed when a test fails. Kill and Start restart it on the same state.
package testprovider

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/internal/freeport"
	"github.com/anvil-metal/anvil/internal/labfactory"
)

var build struct {
	once               sync.Once
	dir                string
	provider, anvilctl string
	err                error
}

// Binaries builds the provider and anvilctl once per test binary.
func Binaries(t *testing.T) (provider, anvilctl string) {
	t.Helper()

	build.once.Do(func() {
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Join(filepath.Dir(file), "..", "..")

		build.dir, build.err = os.MkdirTemp("", "anvil-testprovider")
		if build.err != nil {
			return
		}

		build.provider = filepath.Join(build.dir, "provider")
		build.anvilctl = filepath.Join(build.dir, "anvilctl")

		// The Omni adapter beside the provider, where the provider looks for it in Omni mode.
		for out, pkg := range map[string]string{
			build.provider: "./provider/cmd/provider", build.anvilctl: "./provider/cmd/anvilctl",
			filepath.Join(build.dir, "omni-adapter"): "./provider/cmd/omni-adapter",
		} {
			cmd := exec.Command("go", "build", "-o", out, pkg)
			cmd.Dir = root

			if b, err := cmd.CombinedOutput(); err != nil {
				build.err = fmt.Errorf("error building %s: %w\n%s", pkg, err, b)

				return
			}
		}
	})

	require.NoError(t, build.err)

	return build.provider, build.anvilctl
}

// Main runs a test package's tests, then removes the binaries Binaries built for them:
// a package that uses this one calls it from its TestMain.
func Main(m *testing.M) int {
	code := m.Run()

	if build.dir != "" {
		if err := os.RemoveAll(build.dir); err != nil {
			fmt.Fprintf(os.Stderr, "testprovider: removing %s: %v\n", build.dir, err)
		}
	}

	return code
}

// Provider is a provider process on loopback.
type Provider struct {
	t         *testing.T
	StateDir  string
	AssetsDir string
	Args      []string
	HTTPURL   string
	Factory   *labfactory.Factory
	// FactoryURL is where the Image Factory stand-in listens.
	FactoryURL string

	bin, anvilctl string
	cmd           *exec.Cmd
	log           *LogBuffer
}

// Options configure NewWith.
type Options struct {
	// AgentAssets writes fake agent assets (a kernel and initramfs that are not).
	AgentAssets bool
	// Factory configures the Image Factory stand-in, e.g. labfactory.WithAssets.
	Factory []labfactory.Option
	// FactoryPXE points the provider's Talos boots at the stand-in's PXE endpoint
	// rather than the real factory's, so that machines can boot them in the lab.
	FactoryPXE bool
}

// New prepares a provider, with fake agent assets (a kernel and initramfs that are not)
// when withAssets; Start runs it.
func New(t *testing.T, withAssets bool, extra ...string) *Provider {
	t.Helper()

	return NewWith(t, Options{AgentAssets: withAssets}, extra...)
}

// NewWith prepares a provider as configured; extra arguments come last, so they win.
func NewWith(t *testing.T, opts Options, extra ...string) *Provider {
	t.Helper()

	bin, anvilctl := Binaries(t)
	httpPort := FreePort(t, "tcp")
	factory := labfactory.New(opts.Factory...)
	factorySrv := httptest.NewServer(factory)
	t.Cleanup(factorySrv.Close)

	p := &Provider{
		t: t, StateDir: t.TempDir(), AssetsDir: t.TempDir(), HTTPURL: fmt.Sprintf("http://127.0.0.1:%d", httpPort),
		Factory: factory, FactoryURL: factorySrv.URL, bin: bin, anvilctl: anvilctl, log: &LogBuffer{},
	}

	if opts.AgentAssets {
		for name, content := range map[string]string{"vmlinuz-amd64": "KERNEL", "initramfs-amd64.xz": "INITRAMFS", "cmdline-amd64": "console=ttyS0"} {
			require.NoError(t, os.WriteFile(filepath.Join(p.AssetsDir, name), []byte(content), 0o644))
		}
	}

	p.Args = []string{
		"--state-dir", p.StateDir,
		"--api-advertise-address", "127.0.0.1",
		"--api-listen-address", "127.0.0.1",
		"--api-port", fmt.Sprint(httpPort),
		"--dhcp-proxy-iface-or-ip", "lo",
		"--dhcp-port", fmt.Sprint(FreePort(t, "udp")),
		"--dhcp-boot-server-port", fmt.Sprint(FreePort(t, "udp")),
		"--tftp-listen-address", fmt.Sprintf("127.0.0.1:%d", FreePort(t, "udp")),
		"--tftp-root", t.TempDir(),
		"--agent-assets-dir", p.AssetsDir,
		"--image-factory-base-url", factorySrv.URL,
		"--ui-listen-address", fmt.Sprintf("127.0.0.1:%d", FreePort(t, "tcp")),
	}

	if opts.FactoryPXE {
		p.Args = append(p.Args, "--image-factory-pxe-base-url", factorySrv.URL)
	}

	p.Args = append(p.Args, extra...)

	t.Cleanup(func() {
		p.Kill()

		if t.Failed() {
			t.Logf("provider log:\n%s", p.log.String())
		}
	})

	return p
}

// Start runs the provider and waits until its API and control socket answer.
func (p *Provider) Start() {
	p.t.Helper()

	p.cmd = exec.Command(p.bin, p.Args...)
	p.cmd.Stdout = p.log
	p.cmd.Stderr = p.log
	require.NoError(p.t, p.cmd.Start())

	require.Eventually(p.t, func() bool {
		resp, err := http.Get(p.HTTPURL + "/healthz")
		if err != nil {
			return false
		}

		resp.Body.Close()

		_, err = os.Stat(filepath.Join(p.StateDir, "control.sock"))

		return resp.StatusCode == http.StatusOK && err == nil
	}, 60*time.Second, 50*time.Millisecond, "provider did not come up")
}

// Kill ends the provider without a chance to clean up, as a power loss would.
func (p *Provider) Kill() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}

	_ = p.cmd.Process.Signal(syscall.SIGKILL) // fails only if it is gone already
	_ = p.cmd.Wait()                          // killed: its exit status says so
	p.cmd = nil
}

// Log returns what the provider logged.
func (p *Provider) Log() string { return p.log.String() }

// Anvilctl runs anvilctl against the provider's control socket.
func (p *Provider) Anvilctl(args ...string) (string, error) {
	p.t.Helper()

	ctx, cancel := context.WithTimeout(p.t.Context(), 30*time.Second)
	defer cancel()

	out, err := exec.CommandContext(ctx, p.anvilctl, append([]string{"--endpoint", "unix://" + filepath.Join(p.StateDir, "control.sock")}, args...)...).CombinedOutput()

	return string(out), err
}

// MustAnvilctl runs anvilctl and fails the test on error.
func (p *Provider) MustAnvilctl(args ...string) string {
	p.t.Helper()

	out, err := p.Anvilctl(args...)
	require.NoError(p.t, err, "anvilctl %v: %s", args, out)

	return out
}

// Binary is the provider binary the tests run.
func (p *Provider) Binary() string { return p.bin }

// AnvilctlBinary is the anvilctl the provider is driven with.
func (p *Provider) AnvilctlBinary() string { return p.anvilctl }

// BootScript fetches a machine's iPXE boot script.
func (p *Provider) BootScript(uuid, mac string) (int, string) {
	p.t.Helper()

	resp, err := http.Get(p.HTTPURL + "/ipxe/boot.ipxe?uuid=" + uuid + "&mac=" + strings.ReplaceAll(mac, ":", "-") + "&arch=x86_64&platform=efi")
	require.NoError(p.t, err)

	defer resp.Body.Close()

	body, err := io.ReadAll(resp.Body)
	require.NoError(p.t, err)

	return resp.StatusCode, string(body)
}

// WaitMachine waits until anvilctl lists the machine.
func (p *Provider) WaitMachine(id string) {
	p.t.Helper()

	require.Eventually(p.t, func() bool {
		_, err := p.Anvilctl("get", "machine", id)

		return err == nil
	}, 30*time.Second, 100*time.Millisecond, "machine %s was not recorded", id)
}

// FreePort returns a port free on loopback ("tcp" or "udp"), never one handed out
// before in this test binary (see freeport).
func FreePort(t *testing.T, network string) int {
	t.Helper()

	pick := freeport.TCP
	if network == "udp" {
		pick = freeport.UDP
	}

	port, err := pick()
	require.NoError(t, err)

	return port
}

// LogBuffer is a buffer a process writes its output to while a test reads it.
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()

	return b.buf.Write(p)
}

func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()

	return b.buf.String()
}
