//go:build lab

package chaos

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/hack/internal/labtest"
)

var vmAllocationRe = regexp.MustCompile(`(?s)allocation:\s*\n\s+id: (\S+)`)

// TestLabChaosVM is the chaos on a real lab machine, one machine booted once, through its
// life with three faults on the way (the rest of the grid runs on simulated machines,
// TestLabChaosGrid; all of it on VMs in TestChaosVMGrid):
//   - accepted, its initial zero wipe is cut by a power loss: the wipe is not reported
//     done; the provider powers the machine on again and the agent wipes again;
//   - the provider is SIGKILLed in the middle of that second wipe: after its restart the
//     wipe is reported done only once it finished — the whole disk reads zero then — with
//     a verified erase report;
//   - allocated, the provider is SIGKILLed while the stand-in Talos boots: the machine
//     still ends installed, for the same allocation, its labels and erase report kept,
//     and no wipe is started on it again.
func TestLabChaosVM(tt *testing.T) {
	t := labtest.Recording(tt)

	// Zero wipes: the fault must land inside one, and the result can be read back.
	v := newVMLab(t, "anvc", "--wipe-mode", "zeroes")
	id := v.m.UUID

	// 1. Registered (pending): the agent holds.
	v.waitYAML(`name: vda`, "the agent did not register")
	v.logf(v.start, "power-on → agent registered")
	v.must("machine", "label", id, vmLabelKey+"=kept")

	// 2. Accepted: the initial wipe (zeroes), cut by a power loss.
	t0 := time.Now()
	offAccept := v.serialLen()
	v.must("machine", "accept", id)

	owed := v.owedWipe()
	require.NotEmpty(t, owed, "acceptance owes a wipe")

	v.waitSerial(offAccept, vmWipeStartLine, "the initial zero wipe did not start")
	v.logf(t0, "accept → zero wipe started")

	offCut := v.serialLen()
	v.powerCut("mid zero wipe")
	assert.False(t, labtest.HasField(v.yaml(), "wipedID", owed), "a wipe cut by a power loss is never reported done")

	// The provider finds the machine off, owing a wipe: it powers it on, the agent wipes
	// again from the start.
	t0 = time.Now()

	v.waitSerial(offCut, vmWipeStartLine, "the wipe was not started again after the power cut")
	v.logf(t0, "power cut → powered on again → zero wipe started again")
	assert.False(t, labtest.HasField(v.yaml(), "wipedID", owed), "a wipe cut by a power loss is never reported done")

	// 3. SIGKILL in the middle of it. The agent goes on; the restarted provider hears the
	// result (or orders the wipe again) and records it only once it is done.
	v.killProvider("mid zero wipe")

	t0 = time.Now()
	y := v.waitYAML(`wipedID: ['"]?`+regexp.QuoteMeta(owed), "the wipe was not reported done after the restart")
	v.logf(t0, "restart → wipe reported done")

	// The report came after the wipe finished: the whole disk reads zero.
	v.assertZeroed("when the wipe was reported done")
	assert.Regexp(t, `(?s)lastWipe:.*id: `+regexp.QuoteMeta(owed)+`.*device: vda.*method: zeroes.*verified:`, y, "a verified erase report for the owed wipe")

	starts := v.wipeStarts(offAccept)
	assert.GreaterOrEqual(t, starts, 2, "the wipe ran again after the power cut")
	v.logf(v.start, "zero wipe started %d times for the one owed wipe", starts)

	// 4. Allocated: the provider is SIGKILLed while the stand-in Talos boots.
	t0 = time.Now()
	offAlloc := v.serialLen()
	v.must("machine", "allocate", id, "--talos-version", vmTalosVersion)

	intent := v.must("get", "intent", id, "-o", "yaml")
	m := vmAllocationRe.FindStringSubmatch(intent)
	require.NotNil(t, m, "the allocation's id in the intent:\n%s", intent)
	allocation := m[1]

	v.waitSerial(offAlloc, vmTalosStartLine, "the stand-in Talos did not start")
	v.logf(t0, "allocate → stand-in Talos starting")
	v.killProvider("while Talos boots")

	t0 = time.Now()

	v.waitSerial(offAlloc, vmStandin+" installed", "the stand-in Talos did not install")
	y = v.waitYAML(`installedAllocation: ['"]?`+regexp.QuoteMeta(allocation), "the machine was not recorded installed for its allocation")
	v.logf(t0, "restart → Talos installed")

	// 5. Nothing lost across the faults.
	assert.Contains(t, y, "acceptance: accepted")
	assert.True(t, labtest.HasField(y, "wipedID", owed), "wipedID: %s in\n%s", owed, y)
	assert.Regexp(t, `(?s)lastWipe:.*id: `+regexp.QuoteMeta(owed), y, "the erase report is kept")
	assert.Contains(t, v.must("get", "machine", id, "-o", "yaml"), vmLabelKey, "the label is kept")

	// 6. An installed machine is never wiped again: give the provider time to make the
	// mistake (its reconcile, the machine's reboot into the installed system).
	time.Sleep(30 * time.Second)

	assert.Zero(t, v.wipeStarts(offAlloc), "a wipe was started on the allocated machine")
	assert.True(t, labtest.HasField(v.yaml(), "installedAllocation", allocation), "installed under %s", allocation)

	t.Logf("faults: %v; total %.1fs", v.faults, time.Since(v.start).Seconds())

	if t.Failed() {
		t.Logf("machine:\n%s", strings.TrimSpace(v.yaml()))
	}
}
