//go:build lab

package ha

import (
	"strings"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/hack/internal/labtest"
)

// Console lines of the kexec path: the agent's orders, and the kernel it starts.
const (
	kexecOrder = `order received {"order": "kexec-`
	kexecStart = "kexec_core: Starting new kernel"
	holdReady  = `order received {"order": "hold-ready`
)

// leaderKilledMidKexec: the machine idles in its agent (its power kept on) and is
// allocated with kexec allowed; the leader is SIGKILLed as soon as the agent has the kexec
// order. Talos must come up by that kexec, once, with no BMC action on the way: the new
// leader neither power-cycles the machine nor falls back to a reboot through its BMC
// while the kexec'd Talos comes up.
func (c *chaosLab) leaderKilledMidKexec(t labtest.T) {
	const section = "7. The leader SIGKILLed mid-allocation on the kexec path"

	m := c.biosVM(t)
	c.waitWhole(t, "before the kexec allocation")

	serial, bmcLog := m.SerialLog(), c.s.BMCLog(m)

	// Whatever the scenarios before left (installed, or wiped and off idle): wiped, idle
	// in its agent, powered on.
	if strings.Contains(c.machineYAML(t, "intent", m.UUID), "allocation:") {
		c.ctlRetry(t, time.Minute, nil, "machine", "deallocate", m.UUID)
	}

	c.ctlRetry(t, time.Minute, nil, "machine", "power", "on", m.UUID)
	c.ctlRetry(t, time.Minute, nil, "machine", "kexec", "auto", m.UUID)

	agentAt := labtest.MarkLog(serial)

	require.True(t, waitFor(vmDeadline, func() bool {
		out := agentAt.Text()

		return c.wiped(t, m) && strings.Contains(out, agentStarting) && strings.Contains(out, holdReady)
	}), "the machine is not idle in its agent, wiped:\n%s", tail(agentAt.Text(), 3000))

	// Let the agent settle in its session before the allocation.
	time.Sleep(5 * time.Second)

	leader := waitLeader(t, c.s, -1)
	consoleAt, bmcAt := labtest.MarkLog(serial), labtest.MarkLog(bmcLog)
	installs := count(serial, standin+" installed")
	marks := c.markLogs()
	t0 := time.Now()

	c.ctlRetry(t, time.Minute, []int{leader}, "machine", "allocate", m.UUID, "--talos-version", talosVersion)

	require.True(t, waitFor(vmDeadline, func() bool { return strings.Contains(consoleAt.Text(), kexecOrder) }),
		"the agent got no kexec order:\n%s", tail(consoleAt.Text(), 3000))

	ordered := time.Since(t0)
	killed := time.Now()

	require.NoError(t, c.s.KillReplica(t.Context(), leader))

	next, at := elected(t, marks, leader, 2*time.Minute)
	c.logf(t, "kexec ordered %s after the allocation; leader r%d SIGKILLed, r%d elected after %s", secs(ordered), leader, next, secs(at.Sub(killed)))

	installed := waitFor(vmDeadline, func() bool {
		return count(serial, standin+" installed") > installs &&
			strings.Contains(c.machineYAML(t, "machinestatus", m.UUID, leader), "installedAllocation:")
	})
	assert.True(t, installed, "Talos (the stand-in) was not installed after the kexec:\n%s", tail(consoleAt.Text(), 3000))

	upAt := time.Since(t0)

	// The new leader polls a few times more: nothing may happen at the BMC.
	time.Sleep(20 * time.Second)

	console, bmcSince := consoleAt.Text(), bmcAt.Text()
	on, off, pxe := strings.Count(bmcSince, bmcPowerOn), strings.Count(bmcSince, bmcPowerOff), strings.Count(bmcSince, bmcPXEOnce)
	// Up to the kexec: the stand-in reboots itself after its install, as Talos does,
	// through the firmware to its disk.
	toKexec, _, _ := strings.Cut(console, kexecStart)
	kexecs, firmware := strings.Count(console, kexecStart), strings.Count(toKexec, "iPXE")

	assert.Equal(t, 1, kexecs, "one kexec")
	assert.Zero(t, firmware, "no firmware boot on the way to the kexec (no reboot through the BMC)")
	assert.Equal(t, 1, count(serial, standin+" installed")-installs, "Talos installed once")
	assert.Zero(t, on+off+pxe, "no BMC action since the allocation:\n%s", bmcSince)

	c.fig.Add(section, "leader r%d SIGKILLed %s after the allocation, once the agent had its kexec order; r%d elected after %s",
		leader, secs(ordered), next, secs(at.Sub(killed)))
	c.fig.Add(section, "  Talos installed %s after the allocation: kexecs %d, firmware boots before the kexec %d, installs %d; BMC since the allocation: power on %d, off %d, PXE once %d",
		secs(upAt), kexecs, firmware, count(serial, standin+" installed")-installs, on, off, pxe)

	require.NoError(t, c.s.StartReplica(t.Context(), leader))
	c.waitWhole(t, "the kexec allocation")
}
