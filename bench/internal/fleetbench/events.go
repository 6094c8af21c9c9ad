package fleetbench

import (
	"bufio"
	"encoding/json"
	"io"
	"sync"
	"time"
)

// event is what the bench reads of a fleetsim event (agent/internal/fleetsim's doc).
type event struct {
	Time    time.Time `json:"time"`
	Event   string    `json:"event"`
	Machine string    `json:"machine"`
	Index   int       `json:"index"`
	Address string    `json:"address"`
	Order   string    `json:"order"`
	Kind    string    `json:"kind"`
	Wipe    string    `json:"wipe"`
	Status  string    `json:"status"`
	Disks   int       `json:"disks"`
	Via     string    `json:"via"`
}

// simMachine is what the events said of one machine.
type simMachine struct {
	ID            string
	Index         int
	Registrations []time.Time
	// Received is each order's first arrival; Started counts the starts of each wipe
	// generation; Wiped is each wipe generation's first "done" with its disk count.
	Received map[string]time.Time
	Started  map[string]int
	Wiped    map[string]time.Time
	Disks    map[string]int
	Talos    time.Time
}

// fleetEvents gathers the simulator's events as they come.
type fleetEvents struct {
	mu       sync.Mutex
	address  string
	machines map[string]*simMachine
	byIndex  map[int]*simMachine
	lines    int
	bad      int
}

func newFleetEvents() *fleetEvents {
	return &fleetEvents{machines: map[string]*simMachine{}, byIndex: map[int]*simMachine{}}
}

// read consumes r until it ends.
func (fe *fleetEvents) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)

	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			fe.mu.Lock()
			fe.bad++
			fe.mu.Unlock()

			continue
		}

		fe.add(e)
	}
}

func (fe *fleetEvents) add(e event) {
	fe.mu.Lock()
	defer fe.mu.Unlock()

	fe.lines++

	if e.Event == "listening" {
		fe.address = e.Address

		return
	}

	if e.Machine == "" {
		return
	}

	m := fe.machines[e.Machine]
	if m == nil {
		m = &simMachine{
			ID: e.Machine, Index: e.Index, Received: map[string]time.Time{}, Started: map[string]int{},
			Wiped: map[string]time.Time{}, Disks: map[string]int{},
		}
		fe.machines[e.Machine] = m
		fe.byIndex[e.Index] = m
	}

	switch e.Event {
	case "registered":
		m.Registrations = append(m.Registrations, e.Time)
	case "order-received":
		if _, ok := m.Received[e.Order]; !ok {
			m.Received[e.Order] = e.Time
		}
	case "order-started":
		if e.Kind == "wipe" {
			m.Started[e.Wipe]++
		}
	case "order-done":
		if e.Kind == "wipe" && e.Status == "done" {
			if _, ok := m.Wiped[e.Wipe]; !ok {
				m.Wiped[e.Wipe] = e.Time
				m.Disks[e.Wipe] = e.Disks
			}
		}
	case "talos":
		m.Talos = e.Time
	}
}

// view runs f with the events gathered so far, locked.
func (fe *fleetEvents) view(f func(machines map[string]*simMachine)) {
	fe.mu.Lock()
	defer fe.mu.Unlock()

	f(fe.machines)
}

func (fe *fleetEvents) listenAddress() string {
	fe.mu.Lock()
	defer fe.mu.Unlock()

	return fe.address
}
