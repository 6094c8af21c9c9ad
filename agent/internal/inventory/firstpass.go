package inventory

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/cosi-project/runtime/pkg/controller"
)

// firstPasses knows which controllers have not yet finished a first pass over their
// source: until they have, the state says less than the machine has (no disks yet, say).
type firstPasses struct {
	mu      sync.Mutex
	pending map[string]bool
	// all is closed when nothing is pending any more.
	all chan struct{}
}

func newFirstPasses(names []string) *firstPasses {
	p := &firstPasses{pending: map[string]bool{}, all: make(chan struct{})}

	for _, n := range names {
		p.pending[n] = true
	}

	if len(p.pending) == 0 {
		close(p.all)
	}

	return p
}

// done records name's first pass; later passes, and names not pending, change nothing.
func (p *firstPasses) done(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()

	if !p.pending[name] {
		return
	}

	delete(p.pending, name)

	if len(p.pending) == 0 {
		close(p.all)
	}
}

// wait waits until every controller has finished a first pass, timeout passes or ctx
// ends, and returns the controllers still pending, sorted (none when all are done).
func (p *firstPasses) wait(ctx context.Context, timeout time.Duration) []string {
	timer := time.NewTimer(timeout)
	defer timer.Stop()

	select {
	case <-p.all:
		return nil
	case <-timer.C:
	case <-ctx.Done():
	}

	p.mu.Lock()
	defer p.mu.Unlock()

	var late []string

	for n := range p.pending {
		late = append(late, n)
	}

	slices.Sort(late)

	return late
}

// firstPass is embedded in every inventory controller; the Collector sets report, which
// the controller calls when its first pass over its source has ended, however it ended:
// a source that failed has nothing more to say until the next tick.
type firstPass struct {
	report func()
}

func (f *firstPass) onFirstPass(report func()) { f.report = report }

// pacer returns a fresh pacer for one Run of the controller: a Run the runtime restarts
// after an error has not finished a pass until it comes back to wait again.
func (f *firstPass) pacer(tick <-chan time.Time) *pacer {
	return &pacer{tick: tick, report: f.report}
}

// pacer paces a controller's reads of its source: the first run event, then every tick.
type pacer struct {
	tick    <-chan time.Time
	report  func()
	started bool
}

// next waits for the next reason to read the source again and reports false when ctx is
// done. Coming back to it means a pass has ended: the first time, report is told.
func (p *pacer) next(ctx context.Context, r controller.Runtime) bool {
	if p.started && p.report != nil {
		p.report()
		p.report = nil
	}

	p.started = true

	select {
	case <-ctx.Done():
		return false
	case <-r.EventCh():
	case <-p.tick:
	}

	return true
}
