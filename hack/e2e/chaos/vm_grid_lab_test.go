//go:build lab

package chaos

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/hack/internal/labtest"
)

// vmFault is one kind of fault the VM grid injects at every step.
type vmFault struct {
	name string
	// power: the machine loses power; otherwise the provider is SIGKILLed.
	power bool
}

// inject injects the fault at step; a machine whose power was cut and that the provider
// must not (or need not) power on again is powered on by the test after settle, as a
// person would.
func (f vmFault) inject(v *vmLab, step string) {
	v.t.Helper()

	if !f.power {
		v.killProvider("at " + step)

		return
	}

	v.powerCut("at " + step)
}

// vmSettle is how long the grid gives the provider to act (or to make a mistake) after a
// fault before it looks.
const vmSettle = 30 * time.Second

// TestChaosVMGrid is the whole chaos grid on a real lab machine: for each fault (SIGKILL
// of the provider, the machine's power cut), one machine is walked through its life and
// the fault is injected at every step — registered (pending), wiping (fast, the initial
// wipe), allocated (Talos booting), installed, deallocated (the reset wipe, zeroes),
// rebooting — and after each the machine must end where it should: nothing lost, no wipe
// reported done that did not finish, no wipe of an installed machine, a pending machine
// never powered or wiped. `make chaos` runs it; it takes about half an hour under TCG.
func TestChaosVMGrid(tt *testing.T) {
	if os.Getenv("ANVIL_CHAOS_FULL") != "1" {
		tt.Skip("the whole chaos grid on lab VMs takes about half an hour: set ANVIL_CHAOS_FULL=1 (make chaos)")
	}

	t := labtest.Recording(tt)

	for _, f := range []vmFault{{name: "sigkill"}, {name: "power-cut", power: true}} {
		t.Run(f.name, func(t labtest.T) { vmWalk(t, f) })
	}
}

// vmWalk walks one machine through its life, injecting f at every step.
func vmWalk(t labtest.T, f vmFault) {
	v := newVMLab(t, "anvg", "--wipe-mode", "fast")
	id := v.m.UUID

	// Registered (pending): the agent holds, touching nothing.
	v.waitYAML(`name: vda`, "the agent did not register")
	v.must("machine", "label", id, vmLabelKey+"=kept")
	v.logf(v.start, "power-on → agent registered")

	f.inject(v, "registered (pending)")

	if f.power {
		// The provider never powers a pending machine: it stays off until someone acts.
		time.Sleep(vmSettle)
		assert.False(t, v.m.Running(), "the provider powered on a pending machine")
		require.NoError(t, v.m.Start(t.Context()))
	}

	v.waitYAML(`acceptance: pending`, "the machine is no longer pending")
	v.assertMarks("a pending machine's disk")

	// Accepted: the initial wipe (fast), faulted mid-way.
	t0 := time.Now()
	off := v.serialLen()
	v.must("machine", "accept", id)

	owed := v.owedWipe()
	require.NotEmpty(t, owed)

	v.waitSerial(off, `wiping disk {"disk": "vda", "mode": "fast"`, "the fast wipe did not start")
	f.inject(v, "wiping (fast)")

	y := v.waitYAML(`wipedID: ['"]?`+regexp.QuoteMeta(owed), "the interrupted fast wipe was not done after the fault")
	assert.Regexp(t, `(?s)lastWipe:.*id: `+regexp.QuoteMeta(owed)+`.*device: vda.*verified:`, y, "a verified erase report")
	v.assertEdgesZeroed("after the fast wipe")
	v.logf(t0, "accept → fast wipe faulted → wipe reported done")

	// Allocated: the fault while Talos boots.
	t0 = time.Now()
	off = v.serialLen()
	v.must("machine", "allocate", id, "--talos-version", vmTalosVersion)

	m := vmAllocationRe.FindStringSubmatch(v.must("get", "intent", id, "-o", "yaml"))
	require.NotNil(t, m)
	allocation := m[1]

	v.waitSerial(off, vmTalosStartLine, "the stand-in Talos did not start")
	f.inject(v, "allocated (Talos booting)")

	v.waitYAML(`installedAllocation: ['"]?`+regexp.QuoteMeta(allocation), "the machine did not end installed")
	v.logf(t0, "allocate → fault while Talos boots → installed")

	// Installed: the fault once Talos runs; the machine must not be wiped, nor its
	// allocation lost.
	t0 = time.Now()
	off = v.serialLen()

	f.inject(v, "installed")
	time.Sleep(vmSettle)

	if f.power && !v.m.Running() {
		v.logf(t0, "the provider left the installed machine off; powering it on")
		require.NoError(t, v.m.Start(t.Context()))
		time.Sleep(vmSettle)
	}

	assert.Zero(t, v.wipeStarts(off), "a wipe was started on the installed machine")
	y = v.yaml()
	assert.True(t, labtest.HasField(y, "installedAllocation", allocation), "installedAllocation: %s in\n%s", allocation, y)
	assert.True(t, labtest.HasField(y, "wipedID", owed), "wipedID: %s in\n%s", owed, y)
	v.logf(t0, "fault while installed → still installed, not wiped")

	// Deallocated: the reset wipe (zeroes this time), faulted mid-way.
	t0 = time.Now()
	v.must("machine", "wipe-mode", "zeroes", id)

	off = v.serialLen()
	v.must("machine", "deallocate", id)

	reset := v.owedWipe()
	require.NotEqual(t, owed, reset, "deallocation owes a new wipe")

	v.waitSerial(off, vmWipeStartLine, "the reset wipe did not start")
	f.inject(v, "deallocated (reset wipe)")
	assert.False(t, labtest.HasField(v.yaml(), "wipedID", reset), "an interrupted wipe is never reported done")

	y = v.waitYAML(`wipedID: ['"]?`+regexp.QuoteMeta(reset), "the interrupted reset wipe was not done after the fault")
	v.assertZeroed("when the reset wipe was reported done")
	assert.Regexp(t, `(?s)lastWipe:.*id: `+regexp.QuoteMeta(reset)+`.*method: zeroes.*verified:`, y)
	assert.Nil(t, vmAllocationRe.FindStringSubmatch(v.must("get", "intent", id, "-o", "yaml")), "available again: no allocation")
	v.logf(t0, "deallocate → reset wipe faulted → done again, whole")

	// Rebooting: a reboot asked for, the fault while the machine goes through its
	// firmware.
	t0 = time.Now()

	if !v.m.Running() {
		require.NoError(t, v.m.Start(t.Context()))
		v.waitSerial(off, "iPXE", "the machine did not boot")
	}

	off = v.serialLen()
	v.must("machine", "reboot", id)
	v.waitSerial(off, "iPXE", "the machine did not reboot through its firmware")
	f.inject(v, "rebooting")
	time.Sleep(vmSettle)

	y = v.yaml()
	assert.Contains(t, y, "acceptance: accepted")
	assert.True(t, labtest.HasField(y, "wipedID", reset), "no new wipe owed by a reboot")
	assert.Equal(t, reset, v.owedWipe(), "no new wipe owed by a reboot")
	assert.Contains(t, v.must("get", "machine", id, "-o", "yaml"), vmLabelKey, "the label is kept")
	v.logf(t0, "reboot → fault → machine as it was")

	t.Logf("%s walk: faults %v; total %.1fs", f.name, v.faults, time.Since(v.start).Seconds())
}

// assertMarks checks the data written before the first boot is all there.
func (v *vmLab) assertMarks(what string) {
	v.t.Helper()

	for _, mk := range vmMarks {
		v.assertPattern(mk.off, mk.n, "0xa5", fmt.Sprintf("%s at %d", what, mk.off))
	}
}

// assertEdgesZeroed checks what a fast wipe promises: the disk's ends (partition tables,
// signatures) and btrfs' mirror superblock read zero.
func (v *vmLab) assertEdgesZeroed(what string) {
	v.t.Helper()

	for _, mk := range vmMarks {
		if mk.off == vmDiskSize/2 {
			continue // a fast wipe leaves the middle
		}

		v.assertPattern(mk.off, mk.n, "0", fmt.Sprintf("%s at %d", what, mk.off))
	}
}

// assertPattern checks that [off, off+n) of the disk reads as pattern.
func (v *vmLab) assertPattern(off, n int64, pattern, what string) {
	v.t.Helper()

	out, err := exec.Command("qemu-io", "-U", "-r", "-f", "qcow2", "-c", fmt.Sprintf("read -P %s %d %d", pattern, off, n), v.m.Disk()).CombinedOutput()
	assert.NoError(v.t, err, "%s: %s", what, out)
	assert.NotContains(v.t, string(out), "Pattern verification failed", "%s: bytes other than %s", what, pattern)
}
