package timeline

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Stage names, in boot order.
const (
	StageDHCP       = "dhcp"       // the first DHCP exchange done (firmware or iPXE)
	StageScript     = "script"     // the provider served the boot script
	StageAssets     = "assets"     // iPXE has loaded the agent's kernel and initramfs
	StagePID1       = "pid1"       // the agent runs as PID 1
	StageRegistered = "registered" // the provider holds the agent's inventory
	StageTalosPXE   = "talos-script"
	StageKernel     = "talos-kernel" // the target ("Talos") kernel runs
)

// AgentStages lists the stages from power-on to a registered agent.
var AgentStages = []string{StageDHCP, StageScript, StageAssets, StagePID1, StageRegistered}

// TalosStages lists the stages from allocation to the target kernel.
var TalosStages = []string{StageTalosPXE, StageKernel}

// Stages is when each stage was reached, as the time since its start (power-on for the
// agent's stages, allocation for Talos'); a stage not seen is absent.
type Stages map[string]time.Duration

// Markers are the console lines that end the console-seen stages.
var (
	dhcpDone    = Any("Station IP address is", ")... ok") // OVMF's PXE; iPXE's "Configuring (net0 …)... ok"
	agentLoaded = All("/assets/agent/initramfs", "ok")
	agentPID1   = Any("metal agent starting")
)

// Agent cuts a machine's boot from power-on to registration, from its console (serial)
// and the provider's log.
func Agent(c *Consoles, serial string, log []Entry, machine string, powerOn time.Time) Stages {
	s := Stages{}

	if l, ok := c.First(serial, powerOn, dhcpDone); ok {
		s[StageDHCP] = l.At.Sub(powerOn)
	}

	if e, ok := FirstEntry(log, powerOn, machine, "boot", map[string]string{"decision": "agent"}); ok {
		s[StageScript] = e.At.Sub(powerOn)
	}

	if l, ok := c.First(serial, powerOn, agentLoaded); ok {
		s[StageAssets] = l.At.Sub(powerOn)
	}

	if l, ok := c.First(serial, powerOn, agentPID1); ok {
		s[StagePID1] = l.At.Sub(powerOn)
	}

	if e, ok := FirstEntry(log, powerOn, machine, "machine inventory", nil); ok {
		s[StageRegistered] = e.At.Sub(powerOn)
	}

	return s
}

// Talos cuts the way from an allocation to the target kernel running: the provider
// serving the Talos script, then the kernel's first line with marker on the console.
func Talos(c *Consoles, serial string, log []Entry, machine string, allocated time.Time, marker string) Stages {
	s := Stages{}

	if e, ok := FirstEntry(log, allocated, machine, "boot", map[string]string{"decision": "talos"}); ok {
		s[StageTalosPXE] = e.At.Sub(allocated)
	}

	if l, ok := c.First(serial, allocated, Any(marker)); ok {
		s[StageKernel] = l.At.Sub(allocated)
	}

	return s
}

// Median is each stage's median over runs (the lower middle of an even count), and how
// many runs saw it.
func Median(runs []Stages) (Stages, map[string]int) {
	values := map[string][]time.Duration{}

	for _, r := range runs {
		for k, v := range r {
			values[k] = append(values[k], v)
		}
	}

	med, n := Stages{}, map[string]int{}

	for k, vs := range values {
		slices.Sort(vs)
		med[k] = vs[(len(vs)-1)/2]
		n[k] = len(vs)
	}

	return med, n
}

// Table renders per-row stages as a text table: rows in the order given, one column per
// stage name, "-" where a stage was not seen.
func Table(title string, rowNames []string, rows map[string]Stages, stages []string) string {
	var b strings.Builder

	b.WriteString(title + "\n")
	fmt.Fprintf(&b, "%-22s", "")

	for _, s := range stages {
		fmt.Fprintf(&b, " %13s", s)
	}

	b.WriteString("\n")

	for _, name := range rowNames {
		fmt.Fprintf(&b, "%-22s", name)

		for _, s := range stages {
			v, ok := rows[name][s]
			if !ok {
				fmt.Fprintf(&b, " %13s", "-")

				continue
			}

			fmt.Fprintf(&b, " %12.1fs", v.Seconds())
		}

		b.WriteString("\n")
	}

	return b.String()
}
