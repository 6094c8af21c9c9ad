// Package machineview keeps the boot services' read view of the machines: an in-memory
// index fed by watching the state, so that answering a booting machine costs a map
// lookup, not reads and copies of three resources.
//
// The view follows the state within a watch event's latency; a boot request that races a
// transition by that much sees the state just before it, as if it had come a moment
// earlier.
package machineview

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/state"

	"github.com/anvil-metal/anvil/provider/internal/lifecycle"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// Entry is what is known of one machine: the lifecycle rules' view of it, without what
// the boot services never read (the machine config, the allocation's extensions and
// kernel args, the user's labels, the last erase report: read those from the state).
// Entries are immutable once published: a change publishes a new one.
type Entry = lifecycle.Machine

// View is the index.
type View struct {
	mu        sync.RWMutex
	byID      map[resource.ID]*Entry
	byAddress map[string]map[resource.ID]struct{}

	// changed is closed and replaced on every change: a broadcast to whoever waits.
	changed chan struct{}

	// agentBoots holds the newest agent token issued per machine ahead of the state,
	// which records it a write later (controllers.MachineController): a note goes once
	// the state has it, so it holds the tokens of the last moment and those of machines
	// the state does not record, bounded by maxAgentBoots. Its own lock: every agent
	// boot script notes one, and must not wait for the view taking in a change. Entries
	// are updated in place, so that a note allocates nothing once the machine has one.
	agentMu    sync.Mutex
	agentBoots map[resource.ID]*time.Time
	// agentSwept is when agentBoots was last swept of old notes.
	agentSwept time.Time

	// talosAt holds, by address, the machine whose Talos fetched its config from there
	// with a valid token (and talosAddr the reverse, one address per machine). Over IPv4
	// Talos speaks from the address iPXE booted it from (the view's byAddress); over IPv6
	// iPXE's DHCPv6 address and Talos' autoconfigured one differ. Its own lock, like
	// agentBoots.
	talosMu   sync.Mutex
	talosAt   map[string]TalosAddress
	talosAddr map[resource.ID]string

	ready     chan struct{}
	readyOnce sync.Once
	restarts  atomic.Int64

	// OnRestart, when set before Run, hears why the view had to start again (to log it).
	OnRestart func(error)
	// Current, when set before Run, errs while the view may be stale: a replica that has
	// not reached the shared state for a while must not decide a machine's boot from it.
	Current func() error
}

// New returns an empty view; Run fills it.
func New() *View {
	return &View{
		byID:       map[resource.ID]*Entry{},
		byAddress:  map[string]map[resource.ID]struct{}{},
		changed:    make(chan struct{}),
		agentBoots: map[resource.ID]*time.Time{},
		talosAt:    map[string]TalosAddress{},
		talosAddr:  map[resource.ID]string{},
		ready:      make(chan struct{}),
	}
}

// Ready is closed once the view holds everything the state held when Run started.
func (v *View) Ready() <-chan struct{} { return v.ready }

// ErrStarting is Serving's error until the view holds the state.
var ErrStarting = errors.New("the provider is starting")

// Serving errs while boots must not be decided from the view: until it holds the state,
// and while it may be stale (Current).
func (v *View) Serving() error {
	select {
	case <-v.ready:
	default:
		return ErrStarting
	}

	if v.Current != nil {
		if err := v.Current(); err != nil {
			return fmt.Errorf("the provider's view of the state may be stale: %w", err)
		}
	}

	return nil
}

// Changed returns a channel closed at the next change of any machine.
func (v *View) Changed() <-chan struct{} {
	v.mu.RLock()
	defer v.mu.RUnlock()

	return v.changed
}

// Get returns the machine's entry, or nil for a machine not known.
func (v *View) Get(id resource.ID) *Entry {
	v.mu.RLock()
	defer v.mu.RUnlock()

	return v.byID[id]
}

// All returns every machine's entry, in no order (metrics count them at scrape time).
func (v *View) All() []*Entry {
	v.mu.RLock()
	defer v.mu.RUnlock()

	entries := make([]*Entry, 0, len(v.byID))
	for _, e := range v.byID {
		entries = append(entries, e)
	}

	return entries
}

// ByAddress returns the machines whose last boot came from the IP address.
func (v *View) ByAddress(addr string) []*Entry {
	v.mu.RLock()
	defer v.mu.RUnlock()

	ids := v.byAddress[addr]
	entries := make([]*Entry, 0, len(ids))

	for id := range ids {
		if e := v.byID[id]; e != nil {
			entries = append(entries, e)
		}
	}

	return entries
}

// Bounds of the agent tokens noted ahead of the state.
const (
	// maxAgentBoots bounds them: a real machine's note goes once the state records it,
	// a write later; those of machines the state does not record (made-up UUIDs past
	// --max-pending-machines) stay until swept. 16384 holds a fleet of 10,000 booting at
	// once with room to spare.
	maxAgentBoots = 16384
	// agentBootKept is the age past which a note is swept once agentBoots is full: by
	// then the state records it, or never records its machine. At most one sweep a
	// agentSweepEvery, so that a flood of new notes does not go over the map each time.
	agentBootKept   = 10 * time.Minute
	agentSweepEvery = time.Second
)

// NoteAgentBoot records that an agent token was issued to the machine.
func (v *View) NoteAgentBoot(id resource.ID, issued time.Time) {
	v.agentMu.Lock()
	defer v.agentMu.Unlock()

	if prev := v.agentBoots[id]; prev != nil {
		if issued.After(*prev) {
			*prev = issued
		}

		return
	}

	if len(v.agentBoots) >= maxAgentBoots {
		v.sweepAgentBoots(issued)
	}

	// A new entry keeps its own copy of the ID, which may be a slice of a request's text
	// (assigning to a map's existing key would keep the caller's, hence the pointer).
	noted := new(time.Time)
	*noted = issued
	v.agentBoots[strings.Clone(id)] = noted
}

// sweepAgentBoots makes room for a note at now: notes older than agentBootKept go (at
// most once an agentSweepEvery), and if none did, one note, whichever the map yields
// first (the state records a real machine's token a moment later all the same: a note
// only says it sooner). Called with agentMu held.
func (v *View) sweepAgentBoots(now time.Time) {
	if now.Sub(v.agentSwept) >= agentSweepEvery {
		v.agentSwept = now

		for id, noted := range v.agentBoots {
			if now.Sub(*noted) > agentBootKept {
				delete(v.agentBoots, id)
			}
		}
	}

	for id := range v.agentBoots {
		if len(v.agentBoots) < maxAgentBoots {
			return
		}

		delete(v.agentBoots, id)
	}
}

// recordedAgentBoot drops the machine's note once the state records a token as new, or
// the machine is gone.
func (v *View) recordedAgentBoot(id resource.ID, recorded time.Time, gone bool) {
	v.agentMu.Lock()
	defer v.agentMu.Unlock()

	if noted := v.agentBoots[id]; noted != nil && (gone || !noted.After(recorded)) {
		delete(v.agentBoots, id)
	}
}

// AgentBootIssued returns when the machine's newest agent token was issued: tokens issued
// earlier are superseded.
func (v *View) AgentBootIssued(id resource.ID) time.Time {
	var newest time.Time

	if e := v.Get(id); e != nil && e.Machine != nil {
		newest = e.Machine.AgentBootIssued
	}

	v.agentMu.Lock()
	defer v.agentMu.Unlock()

	if noted := v.agentBoots[id]; noted != nil && noted.After(newest) {
		newest = *noted
	}

	return newest
}

// TalosAddress is a machine's Talos seen at an address, under an allocation.
type TalosAddress struct {
	Machine    resource.ID
	Allocation string
}

// NoteTalosAddress records that the machine's Talos fetched its config, under the
// allocation, from addr: the machine's newest address replaces its previous one, so the
// map holds one address per machine.
func (v *View) NoteTalosAddress(addr string, id resource.ID, allocation string) {
	v.talosMu.Lock()
	defer v.talosMu.Unlock()

	if prev, ok := v.talosAddr[id]; ok && v.talosAt[prev].Machine == id {
		delete(v.talosAt, prev)
	}

	id = strings.Clone(id)
	v.talosAddr[id] = addr
	v.talosAt[addr] = TalosAddress{Machine: id, Allocation: allocation}
}

// forgetTalosAddress drops the machine's Talos address.
func (v *View) forgetTalosAddress(id resource.ID) {
	v.talosMu.Lock()
	defer v.talosMu.Unlock()

	if prev, ok := v.talosAddr[id]; ok {
		if v.talosAt[prev].Machine == id {
			delete(v.talosAt, prev)
		}

		delete(v.talosAddr, id)
	}
}

// TalosAt returns the machine whose Talos last fetched its config from addr.
func (v *View) TalosAt(addr string) (TalosAddress, bool) {
	v.talosMu.Lock()
	defer v.talosMu.Unlock()

	t, ok := v.talosAt[addr]

	return t, ok
}

// watched are the resource types the view follows.
var watched = []resource.Type{resources.MachineType, resources.MachineIntentType, resources.MachineStatusType, resources.BMCConfigType}

// Restart backoff after a failed watch: a burst of writes that outran the view is over
// at once, a state that keeps failing must not be hammered.
const (
	restartMin = 50 * time.Millisecond
	restartMax = 5 * time.Second
)

// Run follows the state until ctx is done. A watch that fails — above all a burst of
// writes (a rack powering on after an outage) outrunning the state's event history — is
// not fatal: the view starts again from a fresh listing of the state and goes on serving
// what it holds meanwhile.
func (v *View) Run(ctx context.Context, st state.State) error {
	wait := restartMin

	for {
		started := time.Now()

		err := v.follow(ctx, st)
		if ctx.Err() != nil {
			return nil //nolint:nilerr // stopping is not a failure of the watch
		}

		// A view that followed the state for a while met a new burst, not the same fault.
		if time.Since(started) > restartMax {
			wait = restartMin
		}

		v.restarts.Add(1)

		if v.OnRestart != nil {
			v.OnRestart(err)
		}

		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}

		wait = min(wait*2, restartMax)
	}
}

// Restarts is how many times the view had to start again from a fresh listing.
func (v *View) Restarts() int64 { return v.restarts.Load() }

// follow watches every type from a fresh listing until the watch fails or ctx is done.
// Entries the listing no longer holds are dropped once it is complete, so deletions
// missed while the view was behind are not kept.
func (v *View) follow(ctx context.Context, st state.State) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	events := make(chan state.Event)

	for _, typ := range watched {
		md := resource.NewMetadata(resources.NamespaceName, typ, "", resource.VersionUndefined)
		if err := st.WatchKind(ctx, md, events, state.WithBootstrapContents(true)); err != nil {
			return fmt.Errorf("error watching %s: %w", typ, err)
		}
	}

	// listed holds, per type still bootstrapping, the IDs its listing had.
	listed := make(map[resource.Type]map[resource.ID]struct{}, len(watched))
	for _, typ := range watched {
		listed[typ] = map[resource.ID]struct{}{}
	}

	for {
		var ev state.Event

		select {
		case <-ctx.Done():
			return nil
		case ev = <-events:
		}

		switch ev.Type {
		case state.Created, state.Updated:
			if ids := listed[ev.Resource.Metadata().Type()]; ids != nil {
				ids[ev.Resource.Metadata().ID()] = struct{}{}
			}

			v.apply(ev.Resource, false)
		case state.Destroyed:
			v.apply(ev.Resource, true)
		case state.Bootstrapped:
			typ := ev.Resource.Metadata().Type()
			v.prune(typ, listed[typ])
			delete(listed, typ)

			if len(listed) == 0 {
				v.readyOnce.Do(func() { close(v.ready) })
			}
		case state.Errored:
			return fmt.Errorf("error watching machines: %w", ev.Error)
		case state.Noop:
		}
	}
}

// prune drops the typ part of every entry whose ID is not in keep.
func (v *View) prune(typ resource.Type, keep map[resource.ID]struct{}) {
	v.mu.RLock()

	var gone []resource.ID

	for id, e := range v.byID {
		if _, ok := keep[id]; !ok && has(e, typ) {
			gone = append(gone, id)
		}
	}

	v.mu.RUnlock()

	for _, id := range gone {
		v.apply(tombstone(typ, id), true)
	}
}

func has(e *Entry, typ resource.Type) bool {
	switch typ {
	case resources.MachineType:
		return e.Machine != nil
	case resources.MachineIntentType:
		return e.Intent != nil
	case resources.MachineStatusType:
		return e.Status != nil
	case resources.BMCConfigType:
		return e.BMC != nil
	}

	return false
}

// tombstone is an empty resource of the type, enough for apply to drop that part.
func tombstone(typ resource.Type, id resource.ID) resource.Resource {
	switch typ {
	case resources.MachineType:
		return resources.NewMachine(id)
	case resources.MachineIntentType:
		return resources.NewMachineIntent(id)
	case resources.MachineStatusType:
		return resources.NewMachineStatus(id)
	default:
		return resources.NewBMCConfig(id)
	}
}

func (v *View) apply(r resource.Resource, destroyed bool) {
	id := r.Metadata().ID()

	v.mu.Lock()
	defer v.mu.Unlock()

	defer func() {
		close(v.changed)
		v.changed = make(chan struct{})
	}()

	var next Entry

	if cur := v.byID[id]; cur != nil {
		next = *cur
	} else {
		next.ID = id
	}

	switch res := r.(type) {
	case *resources.Machine:
		v.unindexAddress(next.Machine, id)

		next.Machine = nil
		if !destroyed {
			spec := *res.TypedSpec()
			next.Machine = &spec
			v.indexAddress(next.Machine, id)
		}

		v.recordedAgentBoot(id, res.TypedSpec().AgentBootIssued, destroyed)
	case *resources.MachineIntent:
		next.Intent = nil
		if !destroyed {
			next.Intent = trimIntent(res.TypedSpec())
		}
	case *resources.MachineStatus:
		next.Status = nil
		if !destroyed {
			spec := *res.TypedSpec()
			spec.LastWipe = nil
			next.Status = &spec
		}

		// Where the allocation's Talos fetched its configuration is stored: after a
		// restart it is known again from the status alone.
		if f := next.Status; f != nil && f.ConfigFetch != nil {
			v.NoteTalosAddress(f.ConfigFetch.By, id, f.ConfigFetch.AllocationID)
		} else {
			v.forgetTalosAddress(id)
		}
	case *resources.BMCConfig:
		next.BMC = nil
		if !destroyed {
			spec := *res.TypedSpec()
			next.BMC = &spec
		}
	default:
		return
	}

	if next.Machine == nil && next.Intent == nil && next.Status == nil && next.BMC == nil {
		delete(v.byID, id)

		return
	}

	v.byID[id] = &next
}

// trimIntent is what the boot services need of an intent: not the machine config, the
// allocation's extensions and kernel args (the schematic ID stands for them) or the
// user's labels. Entries keep copies of the specs alone, so the resources the watch
// delivered (their metadata, the config, erase reports) are not kept twice in memory.
func trimIntent(in *resources.MachineIntentSpec) *resources.MachineIntentSpec {
	out := *in
	out.Labels = nil

	if in.Allocation != nil {
		a := *in.Allocation
		a.Config, a.Extensions, a.KernelArgs = "", nil, nil
		out.Allocation = &a
	}

	return &out
}

func (v *View) indexAddress(m *resources.MachineSpec, id resource.ID) {
	if m.LastAddress == "" {
		return
	}

	ids := v.byAddress[m.LastAddress]
	if ids == nil {
		ids = map[resource.ID]struct{}{}
		v.byAddress[m.LastAddress] = ids
	}

	ids[id] = struct{}{}
}

func (v *View) unindexAddress(m *resources.MachineSpec, id resource.ID) {
	if m == nil {
		return
	}

	if ids := v.byAddress[m.LastAddress]; ids != nil {
		delete(ids, id)

		if len(ids) == 0 {
			delete(v.byAddress, m.LastAddress)
		}
	}
}
