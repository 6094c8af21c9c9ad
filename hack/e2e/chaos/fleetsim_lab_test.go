//go:build lab

package chaos

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"

	"github.com/anvil-metal/anvil/internal/testprovider"
)

// simFleet is the grid's machines in the fleet simulator (agent/cmd/fleetsim, run by
// testprovider.StartFleetWith): real agent sessions, driven through its stdin controls and
// its power API, read back from its JSON-line events.
type simFleet struct {
	t     *testing.T
	fleet *testprovider.Fleet

	mu       sync.Mutex
	machines map[string]*simRecord
}

// simRecord is a machine's record, kept from the simulator's events.
type simRecord struct {
	machineRecord

	tenant bool
}

// fleetsimEvent is the part of the simulator's events the grid reads (the package doc
// of agent/internal/fleetsim has them all).
type fleetsimEvent struct {
	Event    string `json:"event"`
	Machine  string `json:"machine"`
	Address  string `json:"address"`
	Boot     int    `json:"boot"`
	Decision string `json:"decision"`
	Order    string `json:"order"`
	Kind     string `json:"kind"`
	Wipe     string `json:"wipe"`
	Status   string `json:"status"`
	Disks    int    `json:"disks"`
	Via      string `json:"via"`
	State    string `json:"state"`
	Cmd      string `json:"cmd"`
	Error    string `json:"error"`
}

// startFleet runs n machines against the provider (they boot at once and register,
// pending, until their cells take them on); it is stopped when the test ends.
func startFleet(t *testing.T, n int, providerURL string, args ...string) *simFleet {
	t.Helper()

	f := &simFleet{t: t, machines: map[string]*simRecord{}}
	f.fleet = testprovider.StartFleetWith(t, providerURL, testprovider.FleetOptions{
		N: n, Seed: 15, Args: append([]string{"-kexec=false", "-boot-retry", "500ms", "-reboot-delay", "300ms"}, args...),
		OnEvent: func(line []byte) {
			var e fleetsimEvent
			if err := json.Unmarshal(line, &e); err == nil { // the simulator logs an unreadable line itself
				f.apply(e)
			}
		},
	})

	return f
}

func (f *simFleet) apply(e fleetsimEvent) {
	f.mu.Lock()
	defer f.mu.Unlock()

	switch e.Event {
	case "machine":
		f.machines[e.Machine] = &simRecord{machineRecord: machineRecord{
			executed: map[string]int{}, received: map[string]int{}, wipeStarts: map[string]int{},
			wipesDone: map[string]int{}, wipeDisks: map[string]int{},
		}}

		return
	case "control":
		if e.Error != "" {
			f.t.Logf("chaos: control %q failed: %s", e.Cmd, e.Error)
		}

		return
	}

	m := f.machines[e.Machine]
	if m == nil {
		return
	}

	switch e.Event {
	case "boot-script":
		m.on = true

		switch e.Decision {
		case bootAgent, bootTalos, bootDisk:
			m.running = e.Decision
			m.boots = append(m.boots, e.Decision)
		default:
			m.running = ""
		}
	case "registered":
		m.registered++
	case "order-received":
		m.received[e.Order]++
	case "order-started":
		if e.Kind == "wipe" {
			m.wipeStarts[e.Wipe]++

			if m.tenant {
				m.violations = append(m.violations, fmt.Sprintf("wipe %s started on a machine holding an installed Talos: data loss", e.Wipe))
			}
		}
	case "order-done":
		if e.Status != "done" {
			break
		}

		m.executed[e.Order]++

		if e.Kind == "wipe" {
			m.wipesDone[e.Wipe]++
			m.wipeDisks[e.Wipe] = e.Disks
		}
	case "rebooting":
		m.running = ""
	case "talos":
		if e.Via == "disk" {
			m.running = bootDisk
		} else {
			m.running = bootTalos
		}
	case "power":
		m.on = e.State == "on"
		m.running = ""
	}
}

func (f *simFleet) command(cmd, uuid string) {
	if err := f.fleet.Command(cmd, uuid); err != nil {
		f.t.Errorf("error telling the simulator %s %s: %v", cmd, uuid, err)
	}
}

func (f *simFleet) uuids() []string { return append([]string(nil), f.fleet.UUIDs...) }

func (f *simFleet) powerOn(uuid string)  { f.command("poweron", uuid) }
func (f *simFleet) powerCut(uuid string) { f.command("powercut", uuid) }
func (f *simFleet) cut(uuid string)      { f.command("cut", uuid) }
func (f *simFleet) restore(uuid string)  { f.command("restore", uuid) }

func (f *simFleet) setTenant(uuid string, on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()

	f.machines[uuid].tenant = on
}

func (f *simFleet) record(uuid string) machineRecord {
	f.mu.Lock()
	defer f.mu.Unlock()

	m := f.machines[uuid]
	r := m.machineRecord

	r.boots = append([]string(nil), m.boots...)
	r.violations = append([]string(nil), m.violations...)

	for _, mp := range []*map[string]int{&r.executed, &r.received, &r.wipeStarts, &r.wipesDone, &r.wipeDisks} {
		cp := make(map[string]int, len(*mp))
		for k, v := range *mp {
			cp[k] = v
		}

		*mp = cp
	}

	return r
}

// power is the simulator's own power API, through which the provider drives the machines.
func (f *simFleet) power() http.Handler {
	u, err := url.Parse(f.fleet.PowerURL)
	if err != nil {
		f.t.Fatalf("the simulator's power API %q: %v", f.fleet.PowerURL, err)
	}

	return httputil.NewSingleHostReverseProxy(u)
}
