package controllers_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// The load the power controller puts on the state and on the BMCs: a write when
// something changed, reads spread over the poll interval, calls within Concurrency.

// A BMC that reads as stored poll after poll costs no write; a change in its power costs
// one; and while nothing changes, ObservedAt is stored again every ten minutes.
func TestPowerControllerWritesOnChange(t *testing.T) {
	t.Parallel()

	const (
		id   = "00000000-0000-0000-0000-000000000001"
		poll = 30 * time.Second
	)

	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	bmcs := &fakeBMCs{on: map[string]bool{id: false}, down: map[string]bool{}}
	ctrl := powerController(bmcs, clock)
	ctrl.MinActionInterval = time.Hour // the power pulled later is not put back on
	st := run(t, ctrl)

	setBMC(t, st, id, "pw")
	setIntent(t, st, id, func(s *resources.MachineIntentSpec) {
		s.Acceptance, s.Allocation = resources.AcceptanceAccepted, &resources.Allocation{ID: "a1"}
	})

	eventually(t, st, id, func(ps *resources.PowerStatus) bool {
		return ps.TypedSpec().LastAction == "pxe+on" && ps.TypedSpec().State == resources.PowerOn
	})
	clock.rounds(t, 20)

	version := func() resource.Version {
		ps, err := safe.StateGetByID[*resources.PowerStatus](t.Context(), st, id)
		require.NoError(t, err)

		return ps.Metadata().Version()
	}

	// pollOnce moves time a poll on and waits for the BMC to be read and the read to be
	// dealt with.
	pollOnce := func() {
		t.Helper()

		reads := bmcs.count("1:state")
		clock.advance(poll)
		require.Eventually(t, func() bool { return bmcs.count("1:state") > reads }, 10*time.Second, time.Millisecond)
		clock.rounds(t, 5)
	}

	steady := version()

	for range 10 {
		pollOnce()
	}

	assert.Equal(t, steady.String(), version().String(), "ten polls of a steady BMC: no write")

	// The power pulled: one write, and no more while it stays off (its putting back on
	// held back by the rate limit).
	bmcs.mu.Lock()
	bmcs.on[id] = false
	bmcs.mu.Unlock()

	pollOnce()

	ps := eventually(t, st, id, func(ps *resources.PowerStatus) bool { return ps.TypedSpec().State == resources.PowerOff })
	observed := ps.TypedSpec().ObservedAt

	for range 3 {
		pollOnce()
	}

	assert.Equal(t, steady.Next().String(), version().String(), "a change of power: one write")

	// Ten minutes on, ObservedAt is stored again, once.
	for range 17 {
		pollOnce()
	}

	assert.Equal(t, steady.Next().Next().String(), version().String(), "ObservedAt refreshed once in ten minutes")

	ps = eventually(t, st, id, func(*resources.PowerStatus) bool { return true })
	assert.GreaterOrEqual(t, ps.TypedSpec().ObservedAt.Sub(observed), 10*time.Minute)
	assert.Equal(t, 1, bmcs.count("1:on"), bmcs.log())
}

// A controller that takes over a hundred steady machines whose last reads are a poll
// old reads them over one poll interval, not all at once.
func TestPowerControllerSpreadsFirstReads(t *testing.T) {
	t.Parallel()

	const (
		machines = 100
		poll     = 30 * time.Second
		steps    = 10
	)

	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	st := openStore(t)
	bmcs := &fakeBMCs{on: map[string]bool{}, down: map[string]bool{}}

	ids := make([]string, machines)

	for i := range ids {
		ids[i] = fmt.Sprintf("00000000-0000-0000-0000-%012d", i)
		bmcs.on[ids[i]] = false
		setBMC(t, st, ids[i], "pw")
		setIntent(t, st, ids[i], func(s *resources.MachineIntentSpec) { s.Acceptance = resources.AcceptanceAccepted })
	}

	// The first controller reads every machine at once (none has a power status yet: the
	// power is to be known before anything is decided), finds it off as wanted, and dies.
	stop := runPower(t, st, powerController(bmcs, clock))

	for _, id := range ids {
		eventually(t, st, id, func(ps *resources.PowerStatus) bool { return ps.TypedSpec().State == resources.PowerOff })
	}

	stop()

	reads := func() int {
		n := 0

		for _, call := range bmcs.log() {
			if strings.HasSuffix(call, ":state") {
				n++
			}
		}

		return n
	}

	require.Equal(t, machines, reads())

	// The next takes over a poll later, when every machine is due.
	clock.advance(poll + time.Second)
	runPower(t, st, powerController(bmcs, clock))
	clock.rounds(t, 5*machines)

	at := reads() - machines
	assert.LessOrEqual(t, at, machines/steps, "read at once")

	perStep := make([]int, steps)

	for i := range steps {
		before := reads()

		clock.advance(poll / steps)
		clock.rounds(t, 5*machines)

		perStep[i] = reads() - before
	}

	for i, n := range perStep {
		assert.LessOrEqual(t, n, 2*machines/steps, "step %d of the interval holds a crowd: %v", i, perStep)
	}

	// Time stands at the interval's end: each machine is read there, once (a straggler
	// the rounds above did not reach yet, too).
	require.Eventually(t, func() bool { return reads() >= 2*machines }, 10*time.Second, time.Millisecond, "each machine read in the interval: %v", perStep)
	clock.rounds(t, 5*machines)
	assert.Equal(t, 2*machines, reads(), "each machine read once in the interval: %v", perStep)
}

// The BMC calls of all machines together stay within Concurrency.
func TestPowerControllerConcurrency(t *testing.T) {
	t.Parallel()

	const (
		machines    = 12
		concurrency = 3
	)

	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	st := openStore(t)
	bmcs := &fakeBMCs{on: map[string]bool{}, down: map[string]bool{}}

	var inFlight, most atomic.Int64

	bmcs.hook = func(string, string) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)

		for {
			if m := most.Load(); n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}

		time.Sleep(5 * time.Millisecond)
	}

	for i := range machines {
		id := fmt.Sprintf("00000000-0000-0000-0000-%012d", i)
		bmcs.on[id] = true
		setBMC(t, st, id, "pw")
		setIntent(t, st, id, func(s *resources.MachineIntentSpec) { s.Acceptance = resources.AcceptanceAccepted })
	}

	ctrl := powerController(bmcs, clock)
	ctrl.Concurrency = concurrency
	runPower(t, st, ctrl)

	require.Eventually(t, func() bool { return bmcs.count("1:off") > 0 && len(bmcs.log()) >= 3*machines }, 10*time.Second, time.Millisecond)

	assert.LessOrEqual(t, most.Load(), int64(concurrency))
	assert.Greater(t, most.Load(), int64(1), "calls made in parallel at all")
}
