package labtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/hack/internal/lab"
)

// Binaries are what a lab of VMs runs, built for one test: the provider and anvilctl,
// the lab's power API and factory stand-in, and the boot assets of the agent and of the
// stand-in Talos the factory serves.
type Binaries struct {
	Provider, Anvilctl, Power, Factory string
	Agent, Standin                     string
}

// BuildPrograms builds the lab's programs into bin: the provider (with its Omni adapter),
// anvilctl, the power API and the factory stand-in, and the agent's assets (_out/agent
// where make agent-initramfs has run: AgentAssets). Not the stand-in Talos: a lab of
// real Talos has no use for it.
func BuildPrograms(t testing.TB, root, bin string) Binaries {
	t.Helper()

	b := Binaries{
		Provider: BuildProvider(t, root, bin),
		Anvilctl: filepath.Join(bin, "anvilctl"),
		Power:    filepath.Join(bin, "lab-power"),
		Factory:  filepath.Join(bin, "lab-factory"),
	}

	GoBuild(t, root, b.Anvilctl, "./provider/cmd/anvilctl")
	GoBuild(t, root, b.Power, "./hack/cmd/lab-power")
	GoBuild(t, root, b.Factory, "./hack/cmd/lab-factory")

	b.Agent = AgentAssets(t, root, bin)

	return b
}

// BuildBinaries builds the Binaries into bin: BuildPrograms' and the stand-in's assets,
// always built, as they are small and must match its source.
func BuildBinaries(t testing.TB, root, bin string) Binaries {
	t.Helper()

	b := BuildPrograms(t, root, bin)
	b.Standin = filepath.Join(bin, "talos-standin")

	require.NoError(t, lab.BuildStandinAssets(t.Context(), root, b.Standin), "building the stand-in Talos' boot assets")

	return b
}

// Config is the lab at dir and prefix (NewLab's) running b: the factory stand-in serves
// the stand-in Talos and the power API listens on port 50042. The caller sets the
// machines: how many, their firmware and power owners, and any provider flags.
func (b Binaries) Config(dir, prefix string) lab.Config {
	return lab.Config{
		Dir: dir, Prefix: prefix,
		ProviderBin: b.Provider, AgentAssetsDir: b.Agent, PowerBin: b.Power,
		FactoryURL: "http://" + lab.FactoryListen, FactoryPXEURL: "http://" + lab.FactoryListen,
		FactoryBin: b.Factory, FactoryAssetsDir: b.Standin,
		APIPort: 50042,
	}
}

// Exec runs name with args and fails the test, with their output, if it fails.
func Exec(t testing.TB, name string, args ...string) {
	t.Helper()

	out, err := exec.Command(name, args...).CombinedOutput()
	require.NoError(t, err, "%s %v: %s", name, args, out)
}

// NewDisk creates the qcow2 image path of size bytes, and its directory: a lab machine
// whose disk is there before lab.Up boots from it as it is, so that a test can write data
// for a wipe to remove.
func NewDisk(t testing.TB, path string, size int64) {
	t.Helper()

	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	Exec(t, "qemu-img", "create", "-q", "-f", "qcow2", path, fmt.Sprint(size))
}

// WritePattern writes the byte pattern ("0xa5", …) over [off, off+n) of the qcow2 image
// disk.
func WritePattern(t testing.TB, disk, pattern string, off, n int64) {
	t.Helper()

	Exec(t, "qemu-io", "-f", "qcow2", "-c", fmt.Sprintf("write -P %s %d %d", pattern, off, n), disk)
}

// AssertPattern checks that every byte of [off, off+n) of the qcow2 image disk is pattern
// ("0", "0xa5", …). It reads a disk a running QEMU holds (-U), without writing to it.
func AssertPattern(t testing.TB, disk string, off, n int64, pattern, what string) {
	t.Helper()

	args := append([]string{"-U", "-r", "-f", "qcow2"}, patternReads(pattern, off, n)...)

	out, err := exec.Command("qemu-io", append(args, disk)...).CombinedOutput()
	assert.NoError(t, err, "%s: %s", what, out)
	assert.NotContains(t, string(out), "Pattern verification failed", "%s: bytes other than %s", what, pattern)
}

// maxPatternRead is what one qemu-io read checks: it reads at most 2 GiB - 512 at a time.
const maxPatternRead = 512 << 20

// patternReads are the qemu-io arguments that check [off, off+n) reads pattern, one
// read a maxPatternRead.
func patternReads(pattern string, off, n int64) []string {
	var args []string

	for at := off; at < off+n; at += maxPatternRead {
		args = append(args, "-c", fmt.Sprintf("read -P %s %d %d", pattern, at, min(maxPatternRead, off+n-at)))
	}

	return args
}

var owedWipeRe = regexp.MustCompile(`wipeID: (\S+)`)

// OwedWipe is the wipe id the intent of the machine uuid owes, through ctl (Anvilctl's
// runner): "" when none was ever asked, or the intent cannot be read.
func OwedWipe(ctl func(args ...string) (string, error), uuid string) string {
	// An unreadable intent reads as none owed: the callers wait or assert on the id.
	out, _ := ctl("get", "intent", uuid, "-o", "yaml")
	if m := owedWipeRe.FindStringSubmatch(out); m != nil {
		return m[1]
	}

	return ""
}
