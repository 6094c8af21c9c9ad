package controllers

import (
	"hash/fnv"
	"sync"
	"time"
)

// pollSchedule is when each machine's BMC is next due a poll. It lives in the
// controller's memory only: a poll that reads what is stored already is not worth a
// write (PowerStatus is written when what it records changes), and a controller that
// starts without it (a restart, a new leader) gives each machine its first slot after
// the start rather than reading every BMC at once.
type pollSchedule struct {
	mu    sync.Mutex
	start time.Time            // when the controller started (zero: not known)
	next  map[string]time.Time // machine ID → its next poll
}

// reset forgets every poll, as the controller starts at a moment: what it knew from
// before is stale (another may have led meanwhile).
func (p *pollSchedule) reset(start time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()

	p.start, p.next = start, map[string]time.Time{}
}

// due is when machine id's next poll is due. A machine not read since the controller
// started is due at its first slot after the start, however long the controller took
// to come to it: the first reads are spread over the interval that follows the start.
func (p *pollSchedule) due(id string, now time.Time, interval time.Duration) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()

	if at, ok := p.next[id]; ok {
		return at
	}

	if p.next == nil {
		p.next = map[string]time.Time{}
	}

	from := p.start
	if from.IsZero() || from.After(now) {
		from = now
	}

	p.next[id] = nextPoll(id, from, interval)

	return p.next[id]
}

// read records that machine id's BMC was read at a moment, and returns its next poll:
// its next slot after that moment.
func (p *pollSchedule) read(id string, at time.Time, interval time.Duration) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()

	if p.next == nil {
		p.next = map[string]time.Time{}
	}

	p.next[id] = nextPoll(id, at, interval)

	return p.next[id]
}

// forget drops machine id, whose power status is gone.
func (p *pollSchedule) forget(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()

	delete(p.next, id)
}

// nextPoll is machine id's first poll slot after a moment, within one interval of it.
// A machine's slots are an interval apart at a phase fixed by its ID, so the fleet's
// reads stay spread evenly over the interval whoever reads them and since when: a
// machine read at once (an action to decide) goes back to its own phase, and a new
// leader polls each machine when the old one would have.
func nextPoll(id string, after time.Time, interval time.Duration) time.Time {
	h := fnv.New64a()
	h.Write([]byte(id))

	period := int64(interval)
	phase := int64(h.Sum64() % uint64(period)) //nolint:gosec // interval is positive, the phase below it
	since := ((after.UnixNano()-phase)%period + period) % period

	return after.Add(time.Duration(period - since))
}
