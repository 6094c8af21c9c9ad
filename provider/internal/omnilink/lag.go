package omnilink

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Steps of an Omni change, as anvil_omni_sync_lag_seconds labels them.
const (
	// StepIntent: the change is the machine's intent (what every controller and agent
	// order follows from).
	StepIntent = "intent"
	// StepStatus: the machine's status for Omni was computed from that intent and
	// stored, whence the link streams it to the adapter, which writes it to Omni.
	StepStatus = "status"
)

// Bounds of what SyncLag keeps.
const (
	// lagForget drops a change not carried through in this long (a machine held by a
	// local allocation, or not seen by this provider yet): it is not observed.
	lagForget = time.Hour
	// lagStale: a new change does not inherit the arrival of one this old, which was
	// never carried through (refused, or its write failed), from its lag.
	lagStale     = 5 * time.Minute
	maxLagged    = 16384
	lagSweepEach = time.Minute
)

// SyncLag measures, in Omni mode, how long Omni's changes of a machine take to be
// carried out: from the link receiving Omni's changed view of the machine (the adapter
// relays Omni's watch events as they come; the time is taken just before it is stored)
// to the intent carrying it, and to the status written back. A change that arrives while an earlier one is still on its way
// is timed from the earlier: the lag is that of the oldest change not carried through.
// A nil *SyncLag measures nothing.
type SyncLag struct {
	now func() time.Time
	// observers of the steps, resolved once.
	intent, status prometheus.Observer

	mu        sync.Mutex
	pending   map[string]*syncing
	lastSweep time.Time
}

type syncing struct {
	arrived time.Time
	// applied is when the intent step was done (zero until then); changed whether it
	// changed the intent.
	applied time.Time
	changed bool
	// reported is when a status, computed after the change arrived, was stored before
	// the intent step: it is the status step if the intent did not change.
	reported time.Time
}

// NewSyncLag returns the measure, its histogram registered with reg (none when nil).
func NewSyncLag(reg prometheus.Registerer) *SyncLag {
	hist := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "anvil_omni_sync_lag_seconds",
		Help: "Time from Omni's change of a machine reaching the provider to its intent carrying it (step=intent) and to its status for Omni written back (step=status).",
		// Controllers answer in milliseconds; a provider catching up takes longer.
		Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300},
	}, []string{"step"})

	if reg != nil {
		reg.MustRegister(hist)
	}

	return &SyncLag{
		now:     time.Now,
		intent:  hist.WithLabelValues(StepIntent),
		status:  hist.WithLabelValues(StepStatus),
		pending: map[string]*syncing{},
	}
}

// Arrived records that Omni's view of the machine changed.
func (l *SyncLag) Arrived(machineID string) {
	if l == nil {
		return
	}

	l.mu.Lock()
	defer l.mu.Unlock()

	now := l.now()
	l.sweep(now)

	if p := l.pending[machineID]; p != nil {
		arrived := p.arrived
		if now.Sub(arrived) > lagStale {
			arrived = now
		}

		// Timed from the earlier change, through the steps the new one owes.
		*p = syncing{arrived: arrived}

		return
	}

	if len(l.pending) >= maxLagged {
		return
	}

	l.pending[machineID] = &syncing{arrived: now}
}

// Applied records that the machine's intent carries Omni's view of it now; changed
// says whether that changed the intent.
func (l *SyncLag) Applied(machineID string, changed bool) {
	if l == nil {
		return
	}

	l.mu.Lock()
	defer l.mu.Unlock()

	p := l.pending[machineID]
	if p == nil || !p.applied.IsZero() {
		return
	}

	now := l.now()
	l.intent.Observe(now.Sub(p.arrived).Seconds())
	p.applied, p.changed = now, changed

	// An unchanged intent calls for no new status: the one already stored since the
	// change arrived stands.
	if !changed && !p.reported.IsZero() {
		l.status.Observe(p.reported.Sub(p.arrived).Seconds())
		delete(l.pending, machineID)
	}
}

// Reported records that the machine's status for Omni, from inputs read at started,
// was stored.
func (l *SyncLag) Reported(machineID string, started time.Time) {
	if l == nil {
		return
	}

	l.mu.Lock()
	defer l.mu.Unlock()

	p := l.pending[machineID]
	if p == nil || started.Before(p.arrived) {
		return
	}

	now := l.now()

	switch {
	case p.applied.IsZero():
		if p.reported.IsZero() {
			p.reported = now
		}
	case !p.changed || !started.Before(p.applied):
		l.status.Observe(now.Sub(p.arrived).Seconds())
		delete(l.pending, machineID)
	}
}

// sweep drops the changes that were never carried through, at most once a minute.
func (l *SyncLag) sweep(now time.Time) {
	if now.Sub(l.lastSweep) < lagSweepEach {
		return
	}

	l.lastSweep = now

	for id, p := range l.pending {
		if now.Sub(p.arrived) > lagForget {
			delete(l.pending, id)
		}
	}
}
