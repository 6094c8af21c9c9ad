//go:build lab

package ha

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/hack/internal/lab"
	"github.com/anvil-metal/anvil/hack/internal/labtest"
	"github.com/anvil-metal/anvil/hack/internal/machine"
)

// vmDeadline bounds each step of a lab machine (TCG on a shared host).
const vmDeadline = 8 * time.Minute

// Console lines of the agent.
const agentStarting = "metal agent starting"

var powerOff = regexp.MustCompile(`(?m)^\s*state: '?off'?$`)

// waitFor polls cond every second until it holds or deadline passes.
func waitFor(deadline time.Duration, cond func() bool) bool {
	for end := time.Now().Add(deadline); time.Now().Before(end); time.Sleep(time.Second) {
		if cond() {
			return true
		}
	}

	return cond()
}

// machineYAML is one resource of machine id as a ready replica prints it ("" when none
// answers).
func (c *chaosLab) machineYAML(t labtest.T, kind, id string, not ...int) string {
	t.Helper()

	i := c.readyReplica(t.Context(), not...)
	if i < 0 {
		return ""
	}

	out, _ := c.ctl(i)("get", kind, id, "-o", "yaml")

	return out
}

// registered says whether machine m's agent has reported its inventory.
func (c *chaosLab) registered(t labtest.T, m *machine.Machine) bool {
	return strings.Contains(c.machineYAML(t, "machine", m.UUID), "name: vda")
}

// wiped says whether machine m's owed wipe is recorded done.
func (c *chaosLab) wiped(t labtest.T, m *machine.Machine, not ...int) bool {
	wipeID := field(c.machineYAML(t, "intent", m.UUID, not...), "wipeID")

	return wipeID != "" && wipeID == field(c.machineYAML(t, "machinestatus", m.UUID, not...), "wipedID")
}

// biosVM is the BIOS machine with a simulated IPMI BMC, added to the site, registered
// through it, accepted, wiped and powered off idle: made once, for the scenarios that
// need a machine.
func (c *chaosLab) biosVM(t labtest.T) *machine.Machine {
	t.Helper()

	if c.vm != nil {
		return c.vm
	}

	c.waitWhole(t, "before adding the BIOS machine")

	start := time.Now()

	m, err := c.s.AddMachine(t.Context(), lab.MachineConfig{Firmware: machine.BIOS, BMC: lab.OwnerIPMI})
	require.NoError(t, err)

	require.True(t, waitFor(vmDeadline, func() bool { return c.registered(t, m) }), "the BIOS machine did not register through the site")

	c.vmRegistered = time.Since(start)
	c.logf(t, "BIOS machine %s registered %s after power-on", m.Name, secs(c.vmRegistered))

	c.ctlRetry(t, time.Minute, nil, "machine", "accept", m.UUID)

	require.True(t, waitFor(vmDeadline, func() bool {
		return c.wiped(t, m) && powerOff.MatchString(c.machineYAML(t, "power", m.UUID))
	}), "the accepted machine was not wiped and powered off")

	c.logf(t, "BIOS machine accepted, wiped and powered off idle %s after power-on", secs(time.Since(start)))

	c.vm = m

	return m
}

// diskAnswers are each replica's boot scripts that sent a machine to its disk.
func (c *chaosLab) diskAnswers(t labtest.T) []float64 {
	out := make([]float64, len(c.s.Replicas))
	for i := range c.s.Replicas {
		out[i] = c.metrics(t.Context(), i).Sum("anvil_boot_scripts_total", "decision", "disk")
	}

	return out
}

// deallocatedRebootPartitioned: an installed machine; the replica holding the site's
// address is cut off from etcd (its view now stale: the machine installed), the machine
// is deallocated through another replica and power-cycled through its BMC. It must boot
// the agent and be wiped, and never be sent to its disk: the cut-off replica answers its
// boot script 503, and keepalived moves the site's address to a ready replica.
func (c *chaosLab) deallocatedRebootPartitioned(t labtest.T) {
	const section = "5. A deallocated machine power-cycled while the replica holding the site's address is cut off"

	m := c.biosVM(t)
	c.waitWhole(t, "before the allocation")

	serial, bmcLog := m.SerialLog(), c.s.BMCLog(m)
	installs := count(serial, standin+" installed")
	t0 := time.Now()

	c.ctlRetry(t, time.Minute, nil, "machine", "allocate", m.UUID, "--talos-version", talosVersion)
	require.True(t, waitFor(vmDeadline, func() bool {
		return count(serial, standin+" installed") > installs &&
			strings.Contains(c.machineYAML(t, "machinestatus", m.UUID), "installedAllocation:")
	}), "Talos (the stand-in) was not installed")
	c.logf(t, "allocated and installed in %s", secs(time.Since(t0)))

	c.waitWhole(t, "after the install")

	holder := vipHolder(t, c.s)
	leader := waitLeader(t, c.s, -1)
	marks := c.markLogs()
	consoleAt := labtest.MarkLog(serial)
	bmcAt := labtest.MarkLog(bmcLog)
	disk := c.diskAnswers(t)

	start := time.Now()
	lift := c.partition(t, holder)

	c.ctlRetry(t, 2*time.Minute, []int{holder}, "machine", "deallocate", m.UUID)
	deallocated := time.Since(start)

	bmc := c.s.BMCClient(m)
	require.NoError(t, bmc.Stop(t.Context()), "powering the machine off through its BMC")
	require.NoError(t, bmc.Start(t.Context()), "powering the machine on through its BMC")

	cycled := time.Since(start)

	unready := c.waitReadyz(t, holder, http.StatusServiceUnavailable, time.Minute).Sub(start)
	code, body := get(t.Context(), c.segment.HTTPClient(), c.url(holder, bootQuery(m.UUID, m.MAC)))
	assert.Equal(t, http.StatusServiceUnavailable, code, "the cut-off replica answered the machine's boot script: %s", body)

	to, moved := c.waitVIPMoved(t, holder, time.Minute)

	booted := waitFor(vmDeadline, func() bool {
		out := consoleAt.Text()

		return strings.Contains(out, agentStarting) && strings.Contains(out, wipeOrder) && strings.Contains(out, wipeVDA)
	})
	assert.True(t, booted, "the machine did not boot the agent and start its wipe:\n%s", tail(consoleAt.Text(), 3000))

	done := waitFor(vmDeadline, func() bool { return c.wiped(t, m, holder) })
	assert.True(t, done, "the reset wipe was not recorded done")

	wipedAt := time.Since(start)
	afterDisk := c.diskAnswers(t)

	for i := range c.s.Replicas {
		assert.InDelta(t, disk[i], afterDisk[i], 0, "replica r%d sent a machine to its disk", i)
	}

	var diskBoots []string

	for _, l := range marks[holder].All(msgBoot) {
		if strings.Contains(l.Raw, `"decision":"disk"`) {
			diskBoots = append(diskBoots, l.Raw)
		}
	}

	assert.Empty(t, diskBoots, "the cut-off replica sent the machine to its disk")

	console := consoleAt.Text()
	bmcSince := bmcAt.Text()
	actions := make([]int, len(c.s.Replicas))

	for i, mk := range marks {
		actions[i] = len(mk.All(msgPower))
	}

	c.fig.Add(section, "site address on r%d (leader r%d), cut off; deallocated through another replica after %s, power-cycled through the BMC at %s",
		holder, leader, secs(deallocated), secs(cycled))
	c.fig.Add(section, "  r%d /readyz 503 after %s; its boot script for the machine: %d; site address on r%d after %s",
		holder, secs(unready), code, to, secs(moved.Sub(start)))
	c.fig.Add(section, "  machine booted the agent: %v (agent starts on the console: %d), wipe ordered %d, disk wiped %d; wipe recorded done after %s",
		booted, strings.Count(console, agentStarting), strings.Count(console, wipeOrder), strings.Count(console, wipeVDA), secs(wipedAt))
	c.fig.Add(section, "  disk answers (anvil_boot_scripts_total{decision=\"disk\"}) per replica before %v, after %v; the cut-off replica's disk boots in its log: %d",
		disk, afterDisk, len(diskBoots))
	c.fig.Add(section, "  BMC since the cut: power on %d, power off %d, PXE once %d (the test's own cycle: 1 off, 1 on); power actions logged per replica %v",
		strings.Count(bmcSince, bmcPowerOn), strings.Count(bmcSince, bmcPowerOff), strings.Count(bmcSince, bmcPXEOnce), actions)

	lift()
	c.waitWhole(t, "the address holder's partition")
}

// proxyOffers boots a machine of each firmware through the site, whose three replicas
// each make a ProxyDHCP offer: SeaBIOS with iPXE (the BIOS machine of the other
// scenarios), OVMF with iPXE, OVMF's own PXE (TFTP of iPXE from the offer's server).
// Whether each reaches its agent is reported, with the console's lines saying which
// offer it took.
func (c *chaosLab) proxyOffers(t labtest.T) {
	const section = "6. Each firmware booting through three ProxyDHCP offers at once"

	m := c.biosVM(t)
	c.fig.Add(section, "%-9s registered: %-5v after %s; %s", m.Firmware, true, secs(c.vmRegistered), strings.Join(bootLines(readFile(m.SerialLog())), "; "))

	for _, f := range []machine.Firmware{machine.UEFI, machine.UEFIPXE} {
		c.waitWhole(t, "before the "+string(f)+" machine")

		before := c.pxeCounts(t)
		start := time.Now()

		m, err := c.s.AddMachine(t.Context(), lab.MachineConfig{Firmware: f})
		require.NoError(t, err)

		ok := waitFor(vmDeadline, func() bool { return c.registered(t, m) })
		took := time.Since(start)
		after := c.pxeCounts(t)
		console := readFile(m.SerialLog())

		c.fig.Add(section, "%-9s registered: %-5v after %s; %s", f, ok, secs(took), strings.Join(bootLines(console), "; "))
		c.fig.Add(section, "          per replica (offers, port-4011 ACKs, TFTP transfers): %s", pxeDeltas(before, after))
		c.logf(t, "%s machine registered through the site: %v after %s", f, ok, secs(took))

		// The scenario is three offers at once: every replica made one to this machine.
		for i := range after {
			assert.Greater(t, after[i].offers, before[i].offers, "replica r%d made the %s machine no ProxyDHCP offer", i, f)
		}

		if !ok {
			t.Errorf("the %s machine did not reach its agent through three ProxyDHCP offers within %s; console:\n%s", f, vmDeadline, tail(console, 4000))
			c.fig.Add(section, "          console's end: %s", strings.Join(labtest.NonEmptyLines(tail(console, 800)), " | "))
		}

		require.NoError(t, m.Stop(t.Context()))
	}
}

// pxeCount is one replica's ProxyDHCP and TFTP counts.
type pxeCount struct{ offers, acks, tftp float64 }

func (c *chaosLab) pxeCounts(t labtest.T) []pxeCount {
	out := make([]pxeCount, len(c.s.Replicas))

	for i := range c.s.Replicas {
		mt := c.metrics(t.Context(), i)
		out[i] = pxeCount{
			offers: mt.Sum("anvil_pxe_dhcp_answered_total", "server", "proxy", "type", "offer"),
			acks:   mt.Sum("anvil_pxe_dhcp_answered_total", "server", "bootserver", "type", "ack"),
			tftp:   mt.Sum("anvil_pxe_tftp_transfers_total", "result", "success"),
		}
	}

	return out
}

func pxeDeltas(before, after []pxeCount) string {
	s := make([]string, len(before))
	for i := range before {
		s[i] = fmt.Sprintf("r%d %.0f/%.0f/%.0f", i, after[i].offers-before[i].offers, after[i].acks-before[i].acks, after[i].tftp-before[i].tftp)
	}

	return strings.Join(s, ", ")
}

// bootLinePattern are the console's lines that say which offer a firmware took: iPXE's
// "Next server"/"Filename", OVMF's "Server IP address is"/"NBP filename is".
var bootLinePattern = regexp.MustCompile(`(?m)(Next server: \S+|Filename: \S+|Server IP address is \S+|NBP filename is \S+)`)

// bootLines are the console's first four lines saying which offer was taken.
func bootLines(console string) []string { return bootLinePattern.FindAllString(console, 4) }

// tail is the end of s, at most n bytes, the terminal escapes iPXE writes dropped.
func tail(s string, n int) string {
	s = strings.ReplaceAll(s, "\x1b", "^[")
	if len(s) > n {
		return s[len(s)-n:]
	}

	return s
}
