package fleetbench

import "time"

// Names of the phases the report looks up.
const (
	PhaseSteady = "steady state"
	powerKind   = "PowerStatuses"
)

// Quota is a size etcd's backend may not pass.
type Quota struct {
	Name  string
	Bytes int64
}

// Quotas are etcd's default --quota-backend-bytes and the largest it suggests.
var Quotas = []Quota{
	{Name: "2 GiB quota (etcd's default)", Bytes: 2 << 30},
	{Name: "8 GiB quota (etcd's suggested maximum)", Bytes: 8 << 30},
}

// Compaction is an auto-compaction policy, by the history it holds at most: Revisions,
// and Time of writes at the steady rate. A revision compactor keeps its revisions and runs
// every 5 minutes; a periodic one of 1 h compacts once an hour to the revision of an hour
// before, so up to 2 h are held.
type Compaction struct {
	Name      string
	Revisions int64
	Time      time.Duration
}

// None says whether the policy is no compaction at all.
func (c Compaction) None() bool { return c.Revisions == 0 && c.Time == 0 }

// Compactions are the policies the history is projected under: none, and those
// docs/ha.md recommends (--auto-compaction-mode revision --auto-compaction-retention 1000,
// this cluster's too, or periodic 1h).
var Compactions = []Compaction{
	{Name: "no compaction"},
	{Name: "revision compaction keeping 1000", Revisions: 1000, Time: 5 * time.Minute},
	{Name: "periodic compaction of 1h", Time: 2 * time.Hour},
}

// Steady is the write rate at rest, the keys written and the history they add. The
// ObservedAt refresh of the power controller (one PowerStatus write per BMC each
// observedRefresh) comes in bursts a window may miss or catch: the window's PowerStatus
// writes, all of them refreshes at rest, are replaced by their long-run average.
type Steady struct {
	Window time.Duration
	// Revisions is etcd's revisions/s in the window (write transactions).
	Revisions float64
	// MeasuredWrites and MeasuredBytes are the window's keys written/s and history
	// bytes/s; RefreshSeen its PowerStatus writes/s and Refresh their long-run average.
	MeasuredWrites, MeasuredBytes float64
	RefreshSeen, Refresh          float64
	// Writes and Bytes are the rates carried forward.
	Writes, Bytes float64
}

// PerHour is the history written per hour at rest.
func (s Steady) PerHour() float64 { return s.Bytes * 3600 }

// MeanBytes is the mean history a write adds.
func (s Steady) MeanBytes() float64 {
	if s.Writes <= 0 {
		return 0
	}

	return s.Bytes / s.Writes
}

// SteadyState is the run's rate at rest; false without a measured window on etcd.
func (r *Result) SteadyState() (Steady, bool) {
	var (
		steady *Phase
		power  Writes
	)

	for i := range r.Phases {
		power.add(r.Phases[i].ByType[powerKind])

		if r.Phases[i].Name == PhaseSteady {
			steady = &r.Phases[i]
		}
	}

	if steady == nil || r.Etcd == nil || steady.Took <= 0 {
		return Steady{}, false
	}

	secs := steady.Took.Seconds()
	all, seen := steady.Written(), steady.ByType[powerKind]

	s := Steady{
		Window:         steady.Took,
		Revisions:      float64(steady.Revisions) / secs,
		MeasuredWrites: float64(all.Count()) / secs,
		MeasuredBytes:  float64(all.Bytes) / secs,
		RefreshSeen:    float64(seen.Count()) / secs,
		Refresh:        float64(r.BMCs) / observedRefresh.Seconds(),
	}

	meanPower := 0.0
	if power.Count() > 0 {
		meanPower = float64(power.Bytes) / float64(power.Count())
	}

	s.Writes = s.MeasuredWrites - s.RefreshSeen + s.Refresh
	s.Bytes = s.MeasuredBytes - float64(seen.Bytes)/secs + s.Refresh*meanPower

	return s, true
}

// Projection is the history under one compaction policy against one quota.
type Projection struct {
	Compaction Compaction
	Quota      Quota
	// Level is the size the backend levels off at under a compaction (the live data and
	// the history held, or the size now should it be larger: freed pages are reused, not
	// given back); 0 without compaction, where it grows for ever.
	Level int64
	// Never says the quota is not reached at the steady rate; else Reached is when.
	Never   bool
	Reached time.Duration
}

// Project carries the steady rate forward from the backend's size now (dbSize) and its
// live data (live) under each compaction policy against each quota.
func Project(s Steady, dbSize, live int64) []Projection {
	var out []Projection

	for _, c := range Compactions {
		for _, q := range Quotas {
			p := Projection{Compaction: c, Quota: q}

			if !c.None() {
				held := float64(c.Revisions)*s.MeanBytes() + s.Bytes*c.Time.Seconds()
				p.Level = max(dbSize, live+int64(held))
			}

			switch {
			case dbSize >= q.Bytes:
				// Reached already.
			case s.Bytes <= 0 || !c.None() && p.Level < q.Bytes:
				p.Never = true
			default:
				p.Reached = time.Duration(float64(q.Bytes-dbSize) / s.Bytes * float64(time.Second))
			}

			out = append(out, p)
		}
	}

	return out
}
