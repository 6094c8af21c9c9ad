//go:build lab

package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// What a machine runs, as its boot script said.
const (
	bootAgent = "agent"
	bootTalos = "talos"
	bootDisk  = "disk"
)

// fleet is the grid's simulated machines, whatever runs them.
type fleet interface {
	// uuids are the machines, one per cell, by index.
	uuids() []string
	powerOn(uuid string)
	// powerCut cuts the machine's power at once: the order in flight is abandoned.
	powerCut(uuid string)
	// cut and restore the agent's network.
	cut(uuid string)
	restore(uuid string)
	// setTenant marks the machine as holding an installed Talos: a wipe starting then
	// is data loss, recorded as a violation.
	setTenant(uuid string, on bool)
	record(uuid string) machineRecord
	// power serves the machines' power API (powerwire): what their BMCs answer.
	power() http.Handler
}

// machineRecord is what the grid checks of a machine, as the simulation saw it.
type machineRecord struct {
	on      bool
	running string   // what the current boot runs: agent, talos, disk ("" while booting)
	boots   []string // each boot's kind
	// executed counts each order carried out to the end; received each order's arrivals.
	executed, received map[string]int
	// wipeStarts and wipesDone count each wipe generation's starts and completions.
	wipeStarts, wipesDone map[string]int
	// wipeDisks is how many disks the wipe of each generation reported.
	wipeDisks  map[string]int
	violations []string
	registered int // sessions welcomed, every boot together
}

// machineView is what anvilctl says of a machine.
type machineView struct {
	ID     string `json:"id"`
	Intent struct {
		Acceptance string `json:"acceptance"`
		Allocation *struct {
			ID          string `json:"id"`
			SchematicID string `json:"schematicID"`
		} `json:"allocation"`
		WipeID   string            `json:"wipeID"`
		RebootID string            `json:"rebootID"`
		Labels   map[string]string `json:"labels"`
	} `json:"intent"`
	Status struct {
		InstalledAllocation string `json:"installedAllocation"`
		WipedID             string `json:"wipedID"`
		LastWipe            *struct {
			ID    string `json:"id"`
			Disks []struct {
				Device string `json:"device"`
			} `json:"disks"`
		} `json:"lastWipe"`
		BMCOrder string `json:"bmcOrder"`
	} `json:"status"`
	Labels map[string]string `json:"labels"`
}

func (v machineView) allocation() string {
	if v.Intent.Allocation == nil {
		return ""
	}

	return v.Intent.Allocation.ID
}

// wiped says whether the machine owes no wipe.
func (v machineView) wiped() bool {
	return v.Intent.WipeID != "" && v.Status.WipedID == v.Intent.WipeID
}

// provider is the provider under test, as the grid drives it.
type provider interface {
	Start()
	Kill()
	Anvilctl(args ...string) (string, error)
}

// grid runs cells on one provider: each round prepares its cells (concurrently),
// triggers them, waits until every cell is at its step, SIGKILLs the provider, restarts
// it on the same state dir, and waits until every cell ends where it should.
type grid struct {
	t     *testing.T
	p     provider
	fleet fleet
	bmcs  *bmcs
	// factory switches the Image Factory stand-in off and on; schematics are what it
	// has registered.
	factory    *switchable
	schematics func() []string

	mu    sync.Mutex
	views map[string]machineView
	at    time.Time
}

// cell is one step × fault of a machine's life, on a machine of its own.
type cell struct {
	name string
	uuid string
	// prepare brings the machine to just before its step.
	prepare func(g *grid, c *cell) error
	// trigger takes the step (all of a round's cells at once).
	trigger func(g *grid, c *cell) error
	// armed says the machine is at its step: the provider is killed when all are.
	armed func(g *grid, c *cell) bool
	// onArmed runs once, as soon as the cell is armed (a fault to inject).
	onArmed func(g *grid, c *cell)
	// restarted runs once the provider is back.
	restarted func(g *grid, c *cell)
	// settled says why the cell is not where it should end yet ("" when it is).
	settled func(g *grid, c *cell, v machineView, r machineRecord) string
	// neverBMC: the provider must never call the machine's BMC (pending, rejected).
	neverBMC bool
	// round is the round the cell runs in: each round ends in one SIGKILL.
	round int

	armedDone bool
	armedAt   time.Duration // from the round's triggers
	// mark is state a cell keeps between its steps (a generation, a count).
	mark map[string]string
}

const (
	talosVersion = "v1.11.0"
	// labelKey is the label every cell's machine carries, checked after every restart.
	labelKey = "chaos.example.com/cell"
)

func (g *grid) ctl(args ...string) error {
	out, err := g.p.Anvilctl(args...)
	if err != nil {
		return fmt.Errorf("anvilctl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(out))
	}

	return nil
}

// refresh reads every machine from the provider, at most every 300 ms.
func (g *grid) refresh() error {
	g.mu.Lock()
	defer g.mu.Unlock()

	if time.Since(g.at) < 300*time.Millisecond && g.views != nil {
		return nil
	}

	out, err := g.p.Anvilctl("get", "machines", "-o", "json")
	if err != nil {
		return fmt.Errorf("error listing machines: %w: %s", err, out)
	}

	var list []machineView
	if err = json.Unmarshal([]byte(out), &list); err != nil {
		return fmt.Errorf("error decoding the machines: %w", err)
	}

	g.views = map[string]machineView{}
	for _, v := range list {
		g.views[v.ID] = v
	}

	g.at = time.Now()

	return nil
}

func (g *grid) view(uuid string) machineView {
	g.mu.Lock()
	defer g.mu.Unlock()

	return g.views[uuid]
}

// waitFor polls cond until it is true, ctx ends or d passes.
func waitFor(ctx context.Context, d time.Duration, what string, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()

	for !cond() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("timed out after %v waiting for %s", d, what)
		case <-time.After(200 * time.Millisecond):
		}
	}

	return nil
}

// waitView waits until the machine's view says so.
func (g *grid) waitView(c *cell, d time.Duration, what string, cond func(machineView, machineRecord) bool) error {
	return waitFor(g.t.Context(), d, c.name+": "+what, func() bool {
		if err := g.refresh(); err != nil {
			return false // a provider coming up: asked again
		}

		return cond(g.view(c.uuid), g.fleet.record(c.uuid))
	})
}

// run runs one round of cells.
func (g *grid) run(round string, cells []*cell) {
	t := g.t
	start := time.Now()

	t.Logf("%s: preparing %d cells", round, len(cells))
	if !g.each(cells, "prepare", func(c *cell) error {
		if c.prepare == nil {
			return nil
		}

		return c.prepare(g, c)
	}) {
		t.FailNow() // the round's machines are not where its kill means to find them
	}

	t.Logf("%s: prepared in %v; triggering", round, time.Since(start).Round(time.Millisecond))

	triggered := time.Now()
	g.each(cells, "trigger", func(c *cell) error {
		if c.trigger == nil {
			return nil
		}

		return c.trigger(g, c)
	})

	// Armed: every cell at its step (each fault injected as its cell gets there).
	err := waitFor(t.Context(), 60*time.Second, round+" cells at their steps", func() bool {
		_ = g.refresh() // a failed read leaves the cells unarmed: asked again

		all := true

		for _, c := range cells {
			if c.armedDone {
				continue
			}

			if c.armed != nil && !c.armed(g, c) {
				all = false

				continue
			}

			c.armedDone = true
			c.armedAt = time.Since(triggered)

			if c.onArmed != nil {
				c.onArmed(g, c)
			}
		}

		return all
	})
	if err != nil {
		var waiting []string

		for _, c := range cells {
			if !c.armedDone {
				waiting = append(waiting, c.name)
			}
		}

		t.Fatalf("%v (still waiting: %v)", err, waiting)
	}

	// Still at their steps? A step that passed before the kill (a wipe done already) is
	// said, so that a loaded host's slowness shows rather than hides.
	_ = g.refresh()

	var at []string

	for _, c := range cells {
		still := c.armed == nil || c.armed(g, c)
		at = append(at, fmt.Sprintf("%s at %v%s", c.name, c.armedAt.Round(time.Millisecond), map[bool]string{true: "", false: " (passed)"}[still]))
	}

	killed := time.Now()

	g.p.Kill()
	t.Logf("%s: provider SIGKILLed %v after the triggers; steps reached: %s", round, killed.Sub(triggered).Round(time.Millisecond), strings.Join(at, ", "))

	// Down long enough for agents to notice and orders in flight to move on.
	time.Sleep(2 * time.Second)
	g.p.Start()

	g.mu.Lock()
	g.views = nil
	g.mu.Unlock()

	t.Logf("%s: provider back %v after the kill", round, time.Since(killed).Round(time.Millisecond))

	for _, c := range cells {
		if c.restarted != nil {
			c.restarted(g, c)
		}
	}

	g.settle(round, cells)

	t.Logf("%s: settled %v after the restart (%v in all)", round, time.Since(killed).Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}

// settle waits until every cell is where it should end, then checks the invariants of
// every cell.
func (g *grid) settle(what string, cells []*cell) {
	var why map[string]string

	// Settling takes under 20 s here; a cell not settled in a minute is not going to.
	err := waitFor(g.t.Context(), time.Minute, what+": cells settled", func() bool {
		if err := g.refresh(); err != nil {
			return false
		}

		why = map[string]string{}

		for _, c := range cells {
			v, r := g.view(c.uuid), g.fleet.record(c.uuid)
			if w := c.settled(g, c, v, r); w != "" {
				why[c.name] = w
			}
		}

		return len(why) == 0
	})
	if err != nil {
		for _, name := range sortedKeys(why) {
			g.t.Errorf("%s: not settled: %s", name, why[name])
		}
	}

	for _, c := range cells {
		g.invariants(c)
	}
}

// each runs f for every cell at once; errors fail the test, and each says whether
// there were none.
func (g *grid) each(cells []*cell, what string, f func(c *cell) error) bool {
	var wg sync.WaitGroup

	errs := make([]error, len(cells))

	for i, c := range cells {
		wg.Go(func() {
			if err := f(c); err != nil {
				errs[i] = fmt.Errorf("%s %s: %w", c.name, what, err)
			}
		})
	}

	wg.Wait()

	ok := true

	for _, err := range errs {
		if err != nil {
			g.t.Error(err)

			ok = false
		}
	}

	return ok
}

// invariants hold for every cell, whatever its step: nothing lost, no wipe said done
// that did not finish, nothing carried out twice that must not be, no BMC call to a
// machine the provider must keep off.
func (g *grid) invariants(c *cell) {
	t := g.t
	v, r := g.view(c.uuid), g.fleet.record(c.uuid)

	for _, msg := range r.violations {
		t.Errorf("%s: %s", c.name, msg)
	}

	if v.ID == "" {
		t.Errorf("%s: the provider lost the machine", c.name)

		return
	}

	if got := v.Intent.Labels[labelKey]; got != c.slug() {
		t.Errorf("%s: label %s is %q after the restart, want %q", c.name, labelKey, got, c.slug())
	}

	for gen, n := range r.wipesDone {
		if n > 1 {
			t.Errorf("%s: wipe %s carried out %d times", c.name, gen, n)
		}
	}

	for _, order := range []string{"bmc-provision"} {
		if n := r.executed[order]; n > 1 {
			t.Errorf("%s: order %s carried out %d times", c.name, order, n)
		}
	}

	if id := v.Status.WipedID; id != "" {
		if r.wipesDone[id] == 0 {
			t.Errorf("%s: wipe %s recorded done, but no agent finished it", c.name, id)
		}

		switch lw := v.Status.LastWipe; {
		case lw == nil || lw.ID != id:
			t.Errorf("%s: the erase report is not wipe %s's: %+v", c.name, id, lw)
		case len(lw.Disks) != r.wipeDisks[id]:
			t.Errorf("%s: the erase report of wipe %s has %d disks, the agent reported %d", c.name, id, len(lw.Disks), r.wipeDisks[id])
		}
	}

	if c.neverBMC {
		if calls := g.bmcs.callsOf(c.uuid); len(calls) > 0 {
			t.Errorf("%s: the provider called the BMC of a machine it must leave alone: %v", c.name, calls)
		}
	}
}

// slug is the cell's name as a label value.
func (c *cell) slug() string {
	return strings.Trim(strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}

		return '-'
	}, c.name), "-")
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}

	sort.Strings(keys)

	return keys
}

// Steps of the cells, shared.

// boot registers the machine: labelled, powered on, its agent welcomed.
func (g *grid) boot(c *cell, bmc bool) error {
	if bmc {
		if err := g.ctl("machine", "bmc", "set", c.uuid, "--kind", "api", "--address", g.bmcs.url); err != nil {
			return err
		}
	}

	g.fleet.powerOn(c.uuid)

	if err := g.waitView(c, 60*time.Second, "registered", func(v machineView, r machineRecord) bool {
		return v.ID != "" && r.registered > 0
	}); err != nil {
		return err
	}

	return g.ctl("machine", "label", c.uuid, labelKey+"="+c.slug())
}

// ready accepts the machine and waits until it is wiped (and off: the idle power).
func (g *grid) ready(c *cell, mode string) error {
	if mode != "" {
		if err := g.ctl("machine", "wipe-mode", mode, c.uuid); err != nil {
			return err
		}
	}

	if err := g.ctl("machine", "accept", c.uuid); err != nil {
		return err
	}

	return g.waitView(c, 90*time.Second, "wiped and powered off", func(v machineView, r machineRecord) bool {
		return v.wiped() && !r.on
	})
}

// installed allocates the machine and waits for its Talos, then says it installed.
func (g *grid) installed(c *cell) error {
	if err := g.allocate(c); err != nil {
		return err
	}

	if err := g.ctl("machine", "installed", c.uuid); err != nil {
		return err
	}

	g.fleet.setTenant(c.uuid, true)

	return nil
}

func (g *grid) allocate(c *cell) error {
	if err := g.ctl("machine", "allocate", c.uuid, "--talos-version", talosVersion); err != nil {
		return err
	}

	return g.waitView(c, 60*time.Second, "Talos booted", func(_ machineView, r machineRecord) bool {
		return r.running == bootTalos
	})
}

// started says a wipe of the machine's owed generation runs.
func started(g *grid, c *cell) bool {
	v, r := g.view(c.uuid), g.fleet.record(c.uuid)

	return v.Intent.WipeID != "" && r.wipeStarts[v.Intent.WipeID] > 0 && r.wipesDone[v.Intent.WipeID] == 0
}

// readyAgain: wiped, the wipe done once, powered off.
func readyAgain(v machineView, r machineRecord) string {
	switch {
	case v.Intent.Acceptance != "accepted":
		return "acceptance " + v.Intent.Acceptance
	case !v.wiped():
		return fmt.Sprintf("wipe %s owed (wiped %q)", v.Intent.WipeID, v.Status.WipedID)
	case r.wipesDone[v.Intent.WipeID] != 1:
		return fmt.Sprintf("wipe %s finished %d times", v.Intent.WipeID, r.wipesDone[v.Intent.WipeID])
	case r.on:
		return "still powered on (idle power is off)"
	}

	return ""
}

// count says how many of the boots are of kind.
func count(boots []string, kind string) int {
	n := 0

	for _, b := range boots {
		if b == kind {
			n++
		}
	}

	return n
}
