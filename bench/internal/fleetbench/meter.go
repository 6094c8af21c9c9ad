package fleetbench

import (
	"context"
	"fmt"
	"os"
	"time"
)

// Phase is one part of the scenario and what it cost the state.
type Phase struct {
	Name string
	// Machines are those the phase is about: its per-machine figures divide by them.
	Machines int
	Took     time.Duration
	// StateFile is the embedded store's file size at the phase's end (bbolt).
	StateFile int64
	// On etcd: Revisions are the write transactions committed (etcd's revision moved by
	// as many), Counters what a member applied (its /metrics), ByType the keys written
	// under the site's prefix by resource type (the bench's watch of it).
	Revisions int64
	Counters  etcdCounters
	ByType    map[string]Writes
}

// PerSecond is v over the phase's length.
func (p Phase) PerSecond(v float64) float64 {
	if p.Took <= 0 {
		return 0
	}

	return v / p.Took.Seconds()
}

// Written sums ByType.
func (p Phase) Written() Writes {
	var sum Writes
	for _, w := range p.ByType {
		sum.add(w)
	}

	return sum
}

// EtcdResult is what the etcd cluster says of the run.
type EtcdResult struct {
	Members int
	// DBSize and DBSizeInUse are the largest member's backend at the end (the quota is
	// on DBSize: etcd reuses freed pages but does not give them back without a defrag);
	// Live is the size in use once the history was compacted away, at the very end.
	DBSize, DBSizeInUse, Live int64
	// CPU is the members' CPU time, summed.
	CPU time.Duration
	// Missed are revisions the bench's watch lost to a compaction: writes counted in
	// Revisions but in no phase's ByType.
	Missed int64
}

// mark is the state at a phase boundary.
type mark struct {
	name     string
	machines int
	at       time.Time
	file     int64
	rev      int64
	counters etcdCounters
}

// meter reads the state at phase boundaries: the embedded store's file, or etcd's
// revision and counters.
type meter struct {
	file  string
	site  *etcdSite // nil on bbolt
	marks []mark
	err   error // the first reading that failed
}

// mark ends a phase (the first call marks the start). A failed reading is kept for the
// result's problems; the run goes on.
func (m *meter) mark(ctx context.Context, name string, machines int) {
	mk := mark{name: name, machines: machines, at: time.Now()}

	if info, err := os.Stat(m.file); err == nil {
		mk.file = info.Size()
	}

	if m.site != nil {
		var err error

		if mk.rev, err = m.site.revision(ctx); err == nil {
			mk.counters, err = m.site.counters(ctx)
		}

		if err != nil && m.err == nil {
			m.err = fmt.Errorf("phase %q: %w", name, err)
		}
	}

	m.marks = append(m.marks, mk)
}

// finish fills the result's phases and, on etcd, its cluster figures. It compacts
// etcd's whole history: the run's last reading.
func (m *meter) finish(ctx context.Context, res *Result) {
	if len(m.marks) > 0 {
		res.StateFile = m.marks[len(m.marks)-1].file
	}

	if m.site != nil && len(m.marks) > 0 {
		if err := m.site.tally.caughtUp(ctx, m.site.cli, m.marks[len(m.marks)-1].rev); err != nil {
			res.problem("%v: the writes by type of the last phases are short", err)
		}
	}

	for i := 1; i < len(m.marks); i++ {
		prev, mk := m.marks[i-1], m.marks[i]
		p := Phase{Name: mk.name, Machines: mk.machines, Took: mk.at.Sub(prev.at), StateFile: mk.file}

		if m.site != nil {
			p.Revisions = mk.rev - prev.rev
			p.Counters = mk.counters.sub(prev.counters)
			p.ByType = m.site.tally.between(prev.rev, mk.rev)
		}

		res.Phases = append(res.Phases, p)
	}

	if m.err != nil {
		res.problem("reading the state at a phase boundary: %v", m.err)
	}

	if m.site == nil {
		return
	}

	e := &EtcdResult{Members: etcdMembers, CPU: m.site.cpu(), Missed: m.site.tally.missedRevisions()}

	var err error

	if e.DBSize, e.DBSizeInUse, err = m.site.dbSize(ctx); err == nil {
		e.Live, err = m.site.liveSize(ctx)
	}

	if err != nil {
		res.problem("reading etcd's size: %v", err)
	}

	res.Etcd = e
}
