package agentapi

import (
	"sync"
	"time"

	"github.com/anvil-metal/anvil/provider/internal/machineview"
)

// coalesce is how long the follower lets changes gather before it compares: changes come
// in bursts (a fleet registering), one pass over the sessions serves the whole burst, and a
// pass every 5 ms over 10,000 sessions was most of the provider's CPU (bench fleet). It
// adds at most this much to an order's latency.
const coalesce = 50 * time.Millisecond

// machineChanges wakes each session when its own machine's entry changes. The view's
// Changed is a broadcast: with every session waiting on it, a change of any machine woke
// every session to work out its order again — at 10,000 agents, 10,000 wake-ups per
// change, with changes coming by the thousand while a fleet registers (measured: the
// acceptance wipes of 10,000 machines crawled at a few per second). One goroutine follows
// the broadcast instead and wakes only the sessions whose machine changed.
type machineChanges struct {
	view *machineview.View

	mu   sync.Mutex
	subs map[string]map[*subscription]struct{}
	n    int
	// stop ends the follower; it runs while there are subscriptions.
	stop chan struct{}
}

// subscription is one session's: ch has a value when the machine's entry changed since
// the session last looked.
type subscription struct {
	c  *machineChanges
	id string
	ch chan struct{}
	// last is the entry the session was last woken for (entries are immutable: a change
	// is a new pointer). Guarded by c.mu.
	last *machineview.Entry
}

func newMachineChanges(view *machineview.View) *machineChanges {
	return &machineChanges{view: view, subs: map[string]map[*subscription]struct{}{}}
}

// subscribe starts waking the caller for changes of machine id: read the entry after
// subscribing, then wait on the subscription's channel.
func (c *machineChanges) subscribe(id string) *subscription {
	s := &subscription{c: c, id: id, ch: make(chan struct{}, 1), last: c.view.Get(id)}

	c.mu.Lock()
	defer c.mu.Unlock()

	if c.subs[id] == nil {
		c.subs[id] = map[*subscription]struct{}{}
	}

	c.subs[id][s] = struct{}{}
	c.n++

	if c.n == 1 {
		c.stop = make(chan struct{})
		go c.follow(c.stop)
	}

	return s
}

// changed has a value when the machine changed.
func (s *subscription) changed() <-chan struct{} { return s.ch }

// close ends the subscription; the last one ends the follower.
func (s *subscription) close() {
	c := s.c

	c.mu.Lock()
	defer c.mu.Unlock()

	set := c.subs[s.id]
	if _, ok := set[s]; !ok {
		return
	}

	delete(set, s)

	if len(set) == 0 {
		delete(c.subs, s.id)
	}

	c.n--

	if c.n == 0 {
		close(c.stop)
		c.stop = nil
	}
}

// follow wakes the subscriptions whose machine's entry changed, at every change of the
// view, until stop is closed.
func (c *machineChanges) follow(stop <-chan struct{}) {
	for {
		changed := c.view.Changed()

		c.mu.Lock()

		for id, set := range c.subs {
			e := c.view.Get(id)

			for s := range set {
				if s.last == e {
					continue
				}

				s.last = e

				select {
				case s.ch <- struct{}{}:
				default: // woken already, not yet looked
				}
			}
		}

		c.mu.Unlock()

		select {
		case <-stop:
			return
		case <-changed:
		}

		select {
		case <-stop:
			return
		case <-time.After(coalesce):
		}
	}
}
