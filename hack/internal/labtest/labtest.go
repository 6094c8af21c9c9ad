// Package labtest holds what the lab's tests share: the host check, the repository's
// root, building the binaries and boot assets they run, and the logs they print when a
// test fails.
package labtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/hack/internal/lab"
	"github.com/anvil-metal/anvil/hack/internal/machine"
	"github.com/anvil-metal/anvil/internal/netns"
)

// RequireHost skips the test, saying why, where the lab cannot run: not root, or a tool
// missing.
func RequireHost(t testing.TB) {
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
func RepoRoot(t testing.TB) string {
	t.Helper()

	_, file, _, _ := runtime.Caller(0)

	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

// GoBuild builds a static binary of pkg (relative to root) into out.
func GoBuild(t testing.TB, root, out, pkg string) {
	t.Helper()

	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")

	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "building %s: %s", pkg, b)
}

// BuildProvider builds the provider into bin, with its Omni adapter beside it, where the
// provider runs it from, and returns the provider's path.
func BuildProvider(t testing.TB, root, bin string) string {
	t.Helper()

	provider := filepath.Join(bin, "provider")

	GoBuild(t, root, provider, "./provider/cmd/provider")
	GoBuild(t, root, filepath.Join(bin, "omni-adapter"), "./provider/cmd/omni-adapter")

	return provider
}

// OmniBinaries are Omni and omnictl, _out/bin/omni and _out/bin/omnictl, made by "make
// omni" from their tools module through the tool cache (10-15 min the first time on two
// cores, a copy after).
func OmniBinaries(t testing.TB, root string) (omni, omnictl string) {
	t.Helper()

	makeTarget(t, root, "omni")

	return filepath.Join(root, "_out", "bin", "omni"), filepath.Join(root, "_out", "bin", "omnictl")
}

// Talosctl is _out/bin/talosctl, made by "make talosctl" from the Talos tools module
// (hack/tools/talos) through the tool cache (~8 min the first time on two cores, a copy
// after).
func Talosctl(t testing.TB, root string) string {
	t.Helper()

	makeTarget(t, root, "talosctl")

	return filepath.Join(root, "_out", "bin", "talosctl")
}

// RealTalos is real Talos for the lab, as make talos builds it (_out/talos/assets, a
// link into the cache outside the clone): made when missing or when an input changed
// (an hour and more from nothing on two cores, seconds once cached).
type RealTalos struct {
	// Dir holds vmlinuz-amd64, initramfs-amd64.xz, installer-base.tar and talos.json.
	Dir string
	// Version is the Talos version built (talos.json).
	Version string
	// InitramfsSHA256 is the digest of the initramfs make talos produced (talos.json):
	// what a booted machine's Talos must be built from.
	InitramfsSHA256 string
}

// TalosAssets makes real Talos (make talos) and reads what it built.
func TalosAssets(t testing.TB, root string) RealTalos {
	t.Helper()

	makeTarget(t, root, "talos")

	dir := filepath.Join(root, "_out", "talos", "assets")

	b, err := os.ReadFile(filepath.Join(dir, "talos.json"))
	require.NoError(t, err, "make talos wrote no talos.json")

	var m struct {
		TalosVersion string            `json:"talosVersion"`
		Files        map[string]string `json:"files"`
	}

	require.NoError(t, json.Unmarshal(b, &m))
	require.NotEmpty(t, m.TalosVersion, "talos.json names no version")

	return RealTalos{Dir: dir, Version: m.TalosVersion, InitramfsSHA256: m.Files["initramfs-amd64.xz"]}
}

// AgentExtension is Anvil's agent as a Talos system extension, the OCI image layout make
// agent-extension writes (_out/agent-extension), made first: the agent built and packed
// (seconds; the same digest for the same tree).
func AgentExtension(t testing.TB, root string) string {
	t.Helper()

	makeTarget(t, root, "agent-extension")

	return filepath.Join(root, "_out", "agent-extension")
}

// makeTarget runs the Makefile's target in root: make lab has built it already, so this is
// instant there, and a lone go test builds what it needs.
func makeTarget(t testing.TB, root, target string) {
	t.Helper()

	cmd := exec.Command("make", "--no-print-directory", target)
	cmd.Dir = root

	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "make %s: %s", target, b)
}

// AgentAssets is _out/agent when make agent-initramfs has run, else assets built into
// bin.
func AgentAssets(t testing.TB, root, bin string) string {
	t.Helper()

	made := filepath.Join(root, "_out", "agent")
	if lab.BootAssetsExist(made) {
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

// ARM64AgentAssets is a directory with the agent's arm64 boot assets and the UKI stub
// the provider builds arm64 machines' images on: _out/agent, where make agent-arm64
// puts them (Debian's arm64 kernel, fetched, and the agent, cross-compiled), made first
// when missing.
func ARM64AgentAssets(t testing.TB, root string) string {
	t.Helper()

	made := filepath.Join(root, "_out", "agent")
	if ARM64AssetsExist(made) {
		return made
	}

	cmd := exec.Command("make", "agent-arm64")
	cmd.Dir = root

	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "building the agent's arm64 boot assets: %s", b)
	require.True(t, ARM64AssetsExist(made), "make agent-arm64 made no arm64 assets in %s: %s", made, b)

	return made
}

// ARM64AssetsExist tells whether dir has the agent's arm64 kernel, initramfs and UKI stub.
func ARM64AssetsExist(dir string) bool {
	initramfs, _ := filepath.Glob(filepath.Join(dir, "initramfs-arm64.*"))

	for _, name := range []string{"vmlinuz-arm64", "uki-stub-arm64.efi"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			return false
		}
	}

	return len(initramfs) > 0
}

// RequireARM64Host skips the test, saying why, where arm64 machines cannot run: the
// lab's needs, and qemu-system-aarch64 with its firmware.
func RequireARM64Host(t testing.TB) {
	t.Helper()

	RequireHost(t)

	if _, err := exec.LookPath("qemu-system-aarch64"); err != nil {
		t.Skip("needs qemu-system-aarch64 (make setup installs qemu-system-arm)")
	}

	if _, err := os.Stat(machine.AAVMFCode); err != nil {
		t.Skipf("needs %s (make setup installs qemu-efi-aarch64)", machine.AAVMFCode)
	}
}

// DumpLogs prints a lab's logs: the machines' serial consoles, the provider's, the site
// DHCP server's and the factory stand-in's, and, where the lab has them, the simulated
// BMCs', the power API's and Omni's.
func DumpLogs(t testing.TB, dir string) {
	t.Helper()

	logs, _ := filepath.Glob(filepath.Join(dir, "machines", "*", "serial.log"))
	logs = append(logs, filepath.Join(dir, "provider.log"), filepath.Join(dir, "dnsmasq.log"), filepath.Join(dir, "factory.log"))

	optional, _ := filepath.Glob(filepath.Join(dir, "machines", "*", "bmc", "ipmi_sim.log"))
	optional = append(optional, filepath.Join(dir, "power.log"), filepath.Join(dir, "omni.log"))

	// A site of replicas (lab.Config.Replicas): each replica's log, keepalived's, etcd's.
	for _, pattern := range []string{"replica-*/provider.log", "replica-*/keepalived.log", "etcd/etcd-*.log"} {
		site, _ := filepath.Glob(filepath.Join(dir, pattern))
		optional = append(optional, site...)
	}

	for _, l := range append(logs, optional...) {
		b, err := os.ReadFile(l)
		if err != nil {
			if !slices.Contains(optional, l) {
				t.Logf("%s: %v", l, err)
			}

			continue
		}

		// Drop the terminal escapes iPXE writes, which make the log unreadable.
		t.Logf("%s:\n%s", l, bytes.ReplaceAll(b, []byte("\x1b"), []byte("^[")))
	}
}

// NewLab names a lab of the test's own (a directory under t.TempDir(), a prefix made of
// tag and the test process's pid, so that it runs beside any other lab) and registers its
// teardown: on failure the lab's logs, then down (nil: lab.Down), then the check that no
// namespace of the prefix and no process naming the directory is left — pass or fail.
func NewLab(t testing.TB, tag string, down func(ctx context.Context, dir, prefix string) error) (dir, prefix string) {
	t.Helper()

	// The TempDir comes first, so the teardown, registered after it, runs before its removal.
	dir = filepath.Join(t.TempDir(), "lab")
	prefix = fmt.Sprintf("%s%d", tag, os.Getpid()%100000)

	if down == nil {
		down = lab.Down
	}

	t.Cleanup(func() {
		if t.Failed() {
			DumpLogs(t, dir)
		}

		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()

		assert.NoError(t, down(ctx, dir, prefix), "lab down")

		namespaces, err := netns.List()
		assert.NoError(t, err)

		for _, ns := range namespaces {
			assert.False(t, strings.HasPrefix(ns, prefix+"-"), "namespace %s is left behind", ns)
		}

		assert.Empty(t, lab.Processes(dir), "processes of the lab (QEMU, dnsmasq, ipmi_sim, lab-power…) are left behind")
	})

	return dir, prefix
}

// Anvilctl returns a runner of anvilctl against the lab provider's control socket.
func Anvilctl(bin, socket string) func(args ...string) (string, error) {
	return func(args ...string) (string, error) {
		out, err := exec.Command(bin, append([]string{"--endpoint", "unix://" + socket}, args...)...).CombinedOutput()

		return string(out), err
	}
}

// T is a lab test that repeats its failures when it ends: a failure is followed by pages
// of logs (the consoles, the provider's) and CI shows a log's tail.
type T struct {
	*testing.T
	failures *failures
}

type failures struct {
	mu   sync.Mutex
	msgs []string
}

// Recording wraps t: the failures of t, and of the subtests it runs through Run, are
// repeated as t's last output.
func Recording(t *testing.T) T {
	f := &failures{}

	t.Cleanup(func() {
		f.mu.Lock()
		defer f.mu.Unlock()

		if len(f.msgs) > 0 {
			t.Logf("%d failure(s), repeated from above:\n%s", len(f.msgs), strings.Join(f.msgs, "\n"))
		}
	})

	return T{T: t, failures: f}
}

// Run runs f as a subtest whose failures are repeated with t's.
func (t T) Run(name string, f func(T)) bool {
	return t.T.Run(name, func(st *testing.T) { f(T{T: st, failures: t.failures}) })
}

// Errorf records the failure, then reports it as testing.T does.
func (t T) Errorf(format string, args ...any) {
	t.Helper()
	t.record(fmt.Sprintf(format, args...))
	t.T.Errorf(format, args...)
}

// Error records the failure, then reports it as testing.T does.
func (t T) Error(args ...any) {
	t.Helper()
	t.record(fmt.Sprintln(args...))
	t.T.Error(args...)
}

// Fatalf records the failure, then reports it and stops as testing.T does.
func (t T) Fatalf(format string, args ...any) {
	t.Helper()
	t.record(fmt.Sprintf(format, args...))
	t.T.Fatalf(format, args...)
}

// Fatal records the failure, then reports it and stops as testing.T does.
func (t T) Fatal(args ...any) {
	t.Helper()
	t.record(fmt.Sprintln(args...))
	t.T.Fatal(args...)
}

// record keeps a failure's message, cut short: the full one is printed where it happened.
func (t T) record(msg string) {
	const maxLen = 1500

	msg = strings.TrimSpace(msg)
	if len(msg) > maxLen {
		msg = msg[:maxLen] + " …"
	}

	t.failures.mu.Lock()
	defer t.failures.mu.Unlock()

	t.failures.msgs = append(t.failures.msgs, fmt.Sprintf("--- %s (%s):\n%s", t.Name(), time.Now().Format("15:04:05"), msg))
}

// NonEmptyLines are the lines of s (anvilctl's output, a log) that hold more than
// white space.
func NonEmptyLines(s string) []string {
	var lines []string

	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) != "" {
			lines = append(lines, l)
		}
	}

	return lines
}

// HasField reports whether the YAML text y has "key: value", plain or quoted: YAML quotes
// a value that would otherwise read as a number (an all-digit MAC such as
// 52:54:00:05:50:40 is a base-60 integer to YAML 1.1, a hex ID such as 12e4 a float).
func HasField(y, key, value string) bool {
	for _, v := range [...]string{value, "'" + value + "'", `"` + value + `"`} {
		if strings.Contains(y, key+": "+v) {
			return true
		}
	}

	return false
}
