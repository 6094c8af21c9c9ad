//go:build lab

package chaos

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/hack/internal/lab"
	"github.com/anvil-metal/anvil/hack/internal/labtest"
	"github.com/anvil-metal/anvil/hack/internal/machine"
	"github.com/anvil-metal/anvil/internal/proc"
)

// The lab machine of the VM chaos tests: one BIOS machine (the quickest to boot under
// TCG) powered through the lab's power API, with a small disk so that a zero wipe takes
// tens of seconds, long enough to be cut in the middle yet short for the deadlines.
const (
	vmMiB      = 1 << 20
	vmDiskSize = 1 << 30
	// vmDeadline bounds each step: TCG, and other labs on the same two cores.
	vmDeadline      = 6 * time.Minute
	vmTalosVersion  = "v1.9.0"
	vmStandin       = "TALOS-STANDIN"
	vmLabelKey      = "chaos.example.com/vm"
	vmWipeStartLine = `wiping disk {"disk": "vda", "mode": "zeroes"`
	// vmAnyWipeStartLine is the agent's line as it starts wiping the disk, in any mode.
	vmAnyWipeStartLine = `wiping disk {"disk": "vda"`
	vmTalosStartLine   = "talos stand-in starting"
)

// vmMarks are where data is written on the disk before the first boot: a zero wipe must
// leave none of it.
var vmMarks = []struct{ off, n int64 }{{0, vmMiB}, {64 * vmMiB, 4096}, {vmDiskSize / 2, vmMiB}, {vmDiskSize - vmMiB, vmMiB}}

// vmLab is one lab machine under a provider the tests kill.
type vmLab struct {
	t     labtest.T
	cfg   lab.Config
	state *lab.State
	m     *machine.Machine
	ctl   func(args ...string) (string, error)
	start time.Time
	// faults counts the faults injected, for the closing line.
	faults map[string]int
}

// newVMLab builds the binaries and boot assets, and brings a lab with one BIOS machine
// up (powered on: its agent boots); everything is torn down and checked gone at the end.
func newVMLab(t labtest.T, tag string, providerArgs ...string) *vmLab {
	t.Helper()

	labtest.RequireHost(t)

	for _, tool := range []string{"qemu-io", "qemu-img"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (make setup installs it)", tool)
		}
	}

	bins := labtest.BuildBinaries(t, labtest.RepoRoot(t), t.TempDir())
	dir, prefix := labtest.NewLab(t, tag, nil)

	cfg := bins.Config(dir, prefix)
	cfg.Machines, cfg.DiskSize = 1, fmt.Sprint(vmDiskSize)
	cfg.Firmware = []machine.Firmware{machine.BIOS}
	cfg.BMC = []lab.PowerOwner{lab.OwnerAPI}
	cfg.ProviderArgs = providerArgs

	v := &vmLab{t: t, cfg: cfg, faults: map[string]int{}}

	// The disk, with data on it, before anything boots.
	disk := filepath.Join(dir, "machines", "bios-0", "disk.qcow2")
	labtest.NewDisk(t, disk, vmDiskSize)

	for _, mk := range vmMarks {
		labtest.WritePattern(t, disk, "0xa5", mk.off, mk.n)
	}

	v.start = time.Now()

	var err error

	v.state, err = lab.Up(t.Context(), v.cfg)
	require.NoError(t, err)

	machines := v.state.MachineList()
	require.Len(t, machines, 1)

	v.m = machines[0]
	v.ctl = labtest.Anvilctl(bins.Anvilctl, v.state.ControlSocket())

	return v
}

// logf prints a step with the time since from and since the lab came up.
func (v *vmLab) logf(since time.Time, format string, args ...any) {
	v.t.Logf("%-66s %6.1fs (t=%.1fs)", fmt.Sprintf(format, args...), time.Since(since).Seconds(), time.Since(v.start).Seconds())
}

// must runs anvilctl and fails the test on error.
func (v *vmLab) must(args ...string) string {
	v.t.Helper()

	out, err := v.ctl(args...)
	require.NoError(v.t, err, "anvilctl %v: %s", args, out)

	return out
}

// yaml is the machine's record as anvilctl shows it.
func (v *vmLab) yaml() string {
	out, _ := v.ctl("get", "machine", v.m.UUID, "-o", "yaml")

	return out
}

// owedWipe is the wipe id the machine's intent owes ("" when none was ever asked).
func (v *vmLab) owedWipe() string { return labtest.OwedWipe(v.ctl, v.m.UUID) }

// serial is the machine's console since offset.
func (v *vmLab) serial(offset int) string {
	b, _ := os.ReadFile(v.m.SerialLog())
	if offset > len(b) {
		return ""
	}

	return string(b[offset:])
}

// serialLen is where the console ends now.
func (v *vmLab) serialLen() int { return len(v.serial(0)) }

// waitSerial waits for line on the console after offset.
func (v *vmLab) waitSerial(offset int, line, what string) {
	v.t.Helper()

	require.Eventually(v.t, func() bool { return strings.Contains(v.serial(offset), line) }, vmDeadline, 100*time.Millisecond, what)
}

// waitYAML waits until the machine's record matches re.
func (v *vmLab) waitYAML(re, what string) string {
	v.t.Helper()

	rx := regexp.MustCompile(re)

	var y string

	require.Eventually(v.t, func() bool {
		y = v.yaml()

		return rx.MatchString(y)
	}, vmDeadline, time.Second, "%s; last record:\n%s", what, y)

	return y
}

// killProvider SIGKILLs the provider (a crash, an OOM kill, a power loss of its host)
// and starts it again on the same state.
func (v *vmLab) killProvider(at string) {
	v.t.Helper()

	pid := v.state.ProviderPID
	require.NoError(v.t, syscall.Kill(pid, syscall.SIGKILL), "killing the provider")
	require.Eventually(v.t, func() bool { return !proc.Alive(pid) }, 30*time.Second, 50*time.Millisecond, "the provider outlived SIGKILL")

	v.faults["provider SIGKILL"]++
	t0 := time.Now()

	require.NoError(v.t, v.state.RestartProvider(v.t.Context(), v.cfg), "restarting the provider after SIGKILL %s", at)
	v.logf(t0, "SIGKILL %s → provider back", at)
}

// powerCut kills the machine's QEMU: the machine loses power at once, as when its
// PDU trips; its power owner (the lab's power API) then reports it off.
func (v *vmLab) powerCut(at string) {
	v.t.Helper()

	require.NoError(v.t, v.m.Stop(v.t.Context()), "cutting the machine's power %s", at)
	v.faults["power cut"]++
	v.logf(v.start, "power cut %s", at)
}

// assertZeroed checks the whole disk reads as zeroes.
func (v *vmLab) assertZeroed(what string) {
	v.t.Helper()

	labtest.AssertPattern(v.t, v.m.Disk(), 0, vmDiskSize, "0", what)
}

// wipeStarts counts the wipes (any mode) the agent started on the console since offset.
func (v *vmLab) wipeStarts(offset int) int {
	return strings.Count(v.serial(offset), vmAnyWipeStartLine)
}
