// Package labtest holds what the lab's tests share: the host check, the repository's
// root, building the binaries and boot assets they run, and the logs they print when a
// test fails.
package labtest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/hack/internal/lab"
)

// RequireHost skips the test, saying why, where the lab cannot run: not root, or a tool
// missing.
func RequireHost(t *testing.T) {
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

// RepoRoot is the repository's root directory.
func RepoRoot(t *testing.T) string {
	t.Helper()

	_, file, _, _ := runtime.Caller(0)

	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

// GoBuild builds a static binary of pkg (relative to root) into out.
func GoBuild(t *testing.T, root, out, pkg string) {
	t.Helper()

	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")

	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "building %s: %s", pkg, b)
}

// AgentAssets is _out/agent when make agent-initramfs has run, else assets built into
// bin.
func AgentAssets(t *testing.T, root, bin string) string {
	t.Helper()

	made := filepath.Join(root, "_out", "agent")
	if lab.StandinAssetsExist(made) {
		return made
	}

	agent := filepath.Join(bin, "metal-agent")
	GoBuild(t, root, agent, "./agent/cmd/metal-agent")

	out := filepath.Join(bin, "agent")
	cmd := exec.Command("go", "run", "./imager/cmd/imager", "--agent", agent, "--out", out, "--zstd-level", "3")
	cmd.Dir = root

	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "building the agent's boot assets: %s", b)

	return out
}

// DumpLogs prints a lab's logs: the machines' serial consoles, the provider's, the site
// DHCP server's and the factory stand-in's.
func DumpLogs(t *testing.T, dir string) {
	t.Helper()

	logs, _ := filepath.Glob(filepath.Join(dir, "machines", "*", "serial.log"))
	logs = append(logs, filepath.Join(dir, "provider.log"), filepath.Join(dir, "dnsmasq.log"), filepath.Join(dir, "factory.log"))

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
