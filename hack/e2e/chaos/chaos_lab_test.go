//go:build lab

// Package chaos is the chaos grid on simulated machines (no VMs): for each step of a
// machine's life, and for the faults of issue 15 (the agent's network cut mid-wipe, the
// machine's power cut mid-wipe, a BMC flapping, the Image Factory unreachable), one
// machine is brought to that step, the provider is SIGKILLed there and restarted on the
// same state dir, and the machine must end where it should: nothing lost (state, labels,
// erase report), no wipe said done that did not finish, nothing carried out twice that
// must not be (no wipe of an installed machine), no BMC call to a pending or rejected
// machine, every owed order sent again. The machines are the fleet simulator's
// (agent/cmd/fleetsim: real agent sessions, simulated disks and power); the VM cases of
// the grid are in vm_*_test.go.
package chaos

import (
	"fmt"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/anvil-metal/anvil/internal/labfactory"
	"github.com/anvil-metal/anvil/internal/testprovider"
)

func TestLabChaosGrid(t *testing.T) {
	stand := labfactory.New()
	factory := &switchable{next: stand}
	factorySrv := httptest.NewServer(factory)
	t.Cleanup(factorySrv.Close)

	p := testprovider.NewWith(t, testprovider.Options{AgentAssets: true},
		"--disable-dhcp-proxy", "--disable-tftp",
		// Talos boots from the factory stand-in (the provider fetches the schematic's
		// cmdline from it for the boot script), which can then be made unreachable.
		"--image-cache-size", "0",
		"--image-factory-base-url", factorySrv.URL, "--image-factory-pxe-base-url", factorySrv.URL,
		"--kexec", "never",
		// The grid's steps follow each other in seconds: the power actions must too.
		"--min-reboot-interval", "1s", "--power-poll-interval", "2s", "--power-timeout", "2s",
	)

	cells := gridCells()
	p.Start()

	// The wipes take long enough for the provider to be killed while they run; the BMCs
	// the agents provision are IPMI on a loopback port nothing serves (unreachable).
	sims := startFleet(t, len(cells), p.HTTPURL, "-wipe-fast", "6s", "-wipe-zeroes", "12s", "-bmc-port", "9")

	b := newBMCs(sims.power())
	bmcSrv := httptest.NewServer(b)
	t.Cleanup(bmcSrv.Close)
	b.url = bmcSrv.URL

	for i, c := range cells {
		c.uuid = sims.uuids()[i]
		c.mark = map[string]string{}
	}

	g := &grid{t: t, p: p, fleet: sims, bmcs: b, factory: factory, schematics: stand.Registered}

	t.Cleanup(func() {
		if t.Failed() {
			for _, c := range cells {
				r := sims.record(c.uuid)
				t.Logf("%s (%s): on=%v running=%q boots=%v registered=%d received=%v executed=%v wipes started=%v done=%v BMC calls=%d (failed %d)",
					c.name, c.uuid, r.on, r.running, r.boots, r.registered, r.received, r.executed, r.wipeStarts, r.wipesDone, len(b.callsOf(c.uuid)), b.failures(c.uuid))
			}
		}
	})

	start := time.Now()

	// Each round is killed once every one of its cells is at its step: the cells killed
	// within a second of their step first, then those held there by a wipe, then the
	// late steps of a machine's life.
	rounds := []string{"orders in flight", "wipes in flight", "allocated and after"}
	for i, name := range rounds {
		var in []*cell

		for _, c := range cells {
			if c.round == i {
				in = append(in, c)
			}
		}

		g.run(name, in)
	}

	// The later rounds' kills must not have moved the earlier rounds' machines.
	g.settle("every round", cells)

	t.Logf("chaos grid: %d cells, %d provider SIGKILLs, %v", len(cells), len(rounds), time.Since(start).Round(time.Second))
}

// gridCells are the grid: one cell per step × fault.
func gridCells() []*cell {
	withBMC := func(g *grid, c *cell) error { return g.boot(c, true) }

	accept := func(g *grid, c *cell) error { return g.ctl("machine", "accept", c.uuid) }

	bootWithMode := func(mode string) func(g *grid, c *cell) error {
		return func(g *grid, c *cell) error {
			if err := g.boot(c, true); err != nil {
				return err
			}

			return g.ctl("machine", "wipe-mode", mode, c.uuid)
		}
	}

	settledReady := func(_ *grid, _ *cell, v machineView, r machineRecord) string { return readyAgain(v, r) }

	return []*cell{
		{
			name: "registered (pending)", round: 1, prepare: withBMC, neverBMC: true,
			settled: func(_ *grid, _ *cell, v machineView, r machineRecord) string {
				switch {
				case v.Intent.Acceptance != "pending":
					return "acceptance " + v.Intent.Acceptance
				case r.registered < 2:
					return "the agent did not register again"
				case r.received["hold-pending"] < 2:
					return "the hold was not sent again"
				case r.running != bootAgent:
					return "not running the agent: " + r.running
				}

				return ""
			},
		},
		{
			name: "rejected", round: 0, prepare: withBMC, neverBMC: true,
			trigger: func(g *grid, c *cell) error { return g.ctl("machine", "reject", c.uuid) },
			armed:   func(g *grid, c *cell) bool { return g.fleet.record(c.uuid).received["release-rejected"] > 0 },
			settled: func(_ *grid, _ *cell, v machineView, r machineRecord) string {
				switch {
				case v.Intent.Acceptance != "rejected":
					return "acceptance " + v.Intent.Acceptance
				case r.running != bootDisk:
					return "not booted from its disk: " + r.running
				case len(r.wipeStarts) > 0:
					return "a rejected machine was wiped"
				}

				return ""
			},
		},
		{
			name: "accepted", round: 0, prepare: withBMC, trigger: accept, settled: settledReady,
		},
		{
			name: "BMC provisioning", round: 0, trigger: accept,
			prepare: func(g *grid, c *cell) error { return g.boot(c, false) },
			armed: func(g *grid, c *cell) bool {
				// The order is carried out in a few ms: the kill comes as it arrives.
				return g.fleet.record(c.uuid).received["bmc-provision"] > 0
			},
			settled: func(_ *grid, _ *cell, v machineView, r machineRecord) string {
				switch {
				case v.Status.BMCOrder != "bmc-provision":
					return "the BMC provisioning was not recorded"
				case r.executed["bmc-provision"] != 1:
					return fmt.Sprintf("BMC provisioning carried out %d times", r.executed["bmc-provision"])
				case !v.wiped():
					return "wipe owed"
				}

				return "" // its BMC (IPMI on a dead port) cannot power it off: on is fine
			},
		},
		{
			name: "wiping (fast)", round: 1, prepare: bootWithMode("fast"), trigger: accept, armed: started, settled: settledReady,
		},
		{
			name: "wiping (zeroes)", round: 1, prepare: bootWithMode("zeroes"), trigger: accept, armed: started, settled: settledReady,
		},
		{
			name: "network cut mid-wipe", round: 1, prepare: bootWithMode("zeroes"), trigger: accept, armed: started,
			onArmed: func(g *grid, c *cell) { g.fleet.cut(c.uuid) },
			restarted: func(g *grid, c *cell) {
				time.AfterFunc(3*time.Second, func() { g.fleet.restore(c.uuid) })
			},
			settled: func(g *grid, c *cell, v machineView, r machineRecord) string {
				if w := readyAgain(v, r); w != "" {
					return w
				}

				if n := r.wipeStarts[v.Intent.WipeID]; n != 1 {
					return fmt.Sprintf("the wipe started %d times across a network cut", n)
				}

				return ""
			},
		},
		{
			name: "power cut mid-wipe", round: 1, prepare: bootWithMode("zeroes"), trigger: accept, armed: started,
			onArmed: func(g *grid, c *cell) { g.fleet.powerCut(c.uuid) },
			// The power comes back; the provider, which wants the machine on for its
			// wipe, may have turned it on already.
			restarted: func(g *grid, c *cell) { g.fleet.powerOn(c.uuid) },
			settled: func(g *grid, c *cell, v machineView, r machineRecord) string {
				if w := readyAgain(v, r); w != "" {
					return w
				}

				if n := r.wipeStarts[v.Intent.WipeID]; n < 2 {
					return fmt.Sprintf("the wipe cut short was started %d times: never again", n)
				}

				return ""
			},
		},
		{
			name: "factory unreachable", round: 1,
			prepare: func(g *grid, c *cell) error {
				if err := bootWithMode("fast")(g, c); err != nil {
					return err
				}

				return g.ready(c, "")
			},
			trigger: func(g *grid, c *cell) error {
				g.factory.set(true)
				c.mark["wipe"] = g.view(c.uuid).Intent.WipeID

				return g.ctl("machine", "allocate", c.uuid, "--talos-version", talosVersion)
			},
			armed: func(g *grid, c *cell) bool { return g.factory.dropped() > 0 && g.fleet.record(c.uuid).on },
			restarted: func(g *grid, c *cell) {
				time.AfterFunc(3*time.Second, func() { g.factory.set(false) })
			},
			settled: func(g *grid, c *cell, v machineView, r machineRecord) string {
				switch {
				case v.allocation() == "":
					return "the allocation was lost"
				case r.running != bootTalos:
					return "Talos not booted once the factory is back: " + r.running
				case !slices.Contains(g.schematics(), v.Intent.Allocation.SchematicID):
					return "the factory never got the allocation's schematic " + v.Intent.Allocation.SchematicID
				case v.Intent.WipeID != c.mark["wipe"]:
					return "a new wipe was asked"
				}

				return ""
			},
		},
		{
			name: "allocated (Talos booting)", round: 2,
			prepare: func(g *grid, c *cell) error {
				if err := bootWithMode("fast")(g, c); err != nil {
					return err
				}

				return g.ready(c, "")
			},
			trigger: func(g *grid, c *cell) error {
				return g.ctl("machine", "allocate", c.uuid, "--talos-version", talosVersion)
			},
			armed: func(g *grid, c *cell) bool { return g.fleet.record(c.uuid).on },
			settled: func(_ *grid, _ *cell, v machineView, r machineRecord) string {
				switch {
				case v.allocation() == "":
					return "the allocation was lost"
				case r.running != bootTalos:
					return "not running Talos: " + r.running
				case count(r.boots, bootTalos) != 1:
					return fmt.Sprintf("Talos booted %d times", count(r.boots, bootTalos))
				case v.Status.InstalledAllocation != "":
					return "installed, though nobody said so"
				}

				return ""
			},
		},
		{
			name: "installed", round: 2,
			prepare: func(g *grid, c *cell) error {
				if err := bootWithMode("fast")(g, c); err != nil {
					return err
				}

				if err := g.ready(c, ""); err != nil {
					return err
				}

				return g.installed(c)
			},
			settled: func(_ *grid, _ *cell, v machineView, r machineRecord) string {
				switch {
				case v.allocation() == "" || v.Status.InstalledAllocation != v.allocation():
					return "not installed any more"
				case r.running != bootTalos || count(r.boots, bootTalos) != 1:
					return fmt.Sprintf("Talos interrupted: running %q, boots %v", r.running, r.boots)
				}

				return ""
			},
		},
		{
			name: "deallocated (reset wipe)", round: 2,
			prepare: func(g *grid, c *cell) error {
				if err := bootWithMode("zeroes")(g, c); err != nil {
					return err
				}

				if err := g.ready(c, ""); err != nil {
					return err
				}

				if err := g.installed(c); err != nil {
					return err
				}

				c.mark["wipe"] = g.view(c.uuid).Intent.WipeID

				return nil
			},
			trigger: func(g *grid, c *cell) error {
				g.fleet.setTenant(c.uuid, false)

				return g.ctl("machine", "deallocate", c.uuid)
			},
			armed: func(g *grid, c *cell) bool {
				return started(g, c) && g.view(c.uuid).Intent.WipeID != c.mark["wipe"]
			},
			settled: func(_ *grid, c *cell, v machineView, r machineRecord) string {
				if v.Intent.WipeID == c.mark["wipe"] {
					return "no reset wipe asked"
				}

				return readyAgain(v, r)
			},
		},
		{
			name: "rebooting", round: 2,
			prepare: func(g *grid, c *cell) error {
				if err := bootWithMode("fast")(g, c); err != nil {
					return err
				}

				return g.ready(c, "")
			},
			trigger: func(g *grid, c *cell) error {
				c.mark["boots"] = fmt.Sprint(len(g.fleet.record(c.uuid).boots))

				return g.ctl("machine", "reboot", c.uuid)
			},
			armed: func(g *grid, c *cell) bool {
				return fmt.Sprint(len(g.fleet.record(c.uuid).boots)) != c.mark["boots"]
			},
			settled: func(_ *grid, c *cell, v machineView, r machineRecord) string {
				if w := readyAgain(v, r); w != "" {
					return w
				}

				switch before := c.mark["boots"]; {
				case fmt.Sprint(len(r.boots)) == before:
					return "never rebooted"
				case fmt.Sprint(len(r.boots)-1) != before:
					return fmt.Sprintf("rebooted more than once: boots %v, %s before the reboot", r.boots, before)
				}

				return ""
			},
		},
		{
			name: "BMC flapping", round: 2,
			prepare: func(g *grid, c *cell) error {
				g.bmcs.flap(c.uuid)

				return bootWithMode("fast")(g, c)
			},
			trigger: accept,
			settled: func(g *grid, c *cell, v machineView, r machineRecord) string {
				if w := readyAgain(v, r); w != "" {
					return w
				}

				if g.bmcs.failures(c.uuid) == 0 {
					return "the BMC never failed a call"
				}

				return ""
			},
		},
	}
}
