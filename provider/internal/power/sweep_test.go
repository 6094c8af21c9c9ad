package power_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anvil-metal/anvil/provider/internal/power"
)

// fakeBMCs is a Dialer over in-memory BMCs keyed by address: "on", "off", "refuse"
// (dial fails) or "hang" (blocks until ctx ends). It counts the calls in flight to check
// the sweep's bound.
type fakeBMCs struct {
	inFlight atomic.Int64
	maxSeen  atomic.Int64
	closes   atomic.Int64
	dials    atomic.Int64
}

var errRefused = errors.New("refused")

func (f *fakeBMCs) enter() func() {
	n := f.inFlight.Add(1)

	for {
		m := f.maxSeen.Load()
		if n <= m || f.maxSeen.CompareAndSwap(m, n) {
			break
		}
	}

	return func() { f.inFlight.Add(-1) }
}

func (f *fakeBMCs) dial(ctx context.Context, ep power.Endpoint) (power.Client, error) {
	defer f.enter()()

	f.dials.Add(1)

	switch ep.Address {
	case "refuse":
		return nil, errRefused
	case "hang":
		<-ctx.Done()

		return nil, ctx.Err()
	}

	return &fakeClient{f: f, on: ep.Address == "on"}, nil
}

type fakeClient struct {
	power.Client // only PowerState and Close are called

	f  *fakeBMCs
	on bool
}

func (c *fakeClient) PowerState(ctx context.Context) (bool, error) {
	defer c.f.enter()()

	return c.on, ctx.Err()
}

func (c *fakeClient) Close() error {
	c.f.closes.Add(1)

	return nil
}

func targets(addrs ...string) []power.Target {
	ts := make([]power.Target, len(addrs))
	for i, a := range addrs {
		ts[i] = power.Target{ID: "m" + strconv.Itoa(i), Endpoint: power.Endpoint{Backend: power.BackendIPMI, Address: a}}
	}

	return ts
}

func TestSweepStatesInOrder(t *testing.T) {
	f := &fakeBMCs{}
	ts := targets("on", "off", "refuse", "on", "off")

	obs := power.Sweep(context.Background(), ts, power.Dialers{power.BackendIPMI: f.dial}, power.SweepOptions{Concurrency: 2})

	want := []struct {
		on  bool
		err error
	}{{true, nil}, {false, nil}, {false, errRefused}, {true, nil}, {false, nil}}

	if len(obs) != len(want) {
		t.Fatalf("%d observations, want %d", len(obs), len(want))
	}

	for i, o := range obs {
		if o.ID != ts[i].ID {
			t.Errorf("observation %d is of %q, want %q (target order)", i, o.ID, ts[i].ID)
		}

		if o.On != want[i].on || !errors.Is(o.Err, want[i].err) || (want[i].err == nil) != (o.Err == nil) {
			t.Errorf("%s: on %t err %v, want on %t err %v", o.ID, o.On, o.Err, want[i].on, want[i].err)
		}
	}

	if got := f.closes.Load(); got != 4 {
		t.Errorf("%d clients closed, want 4 (every successful dial)", got)
	}
}

func TestSweepBoundsConcurrencyAndTimeout(t *testing.T) {
	for _, tc := range []struct {
		name        string
		concurrency int
		wantLimit   int
	}{
		{"explicit limit", 8, 8},
		{"default limit", 0, power.DefaultConcurrency},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const (
				timeout = 200 * time.Millisecond
				slack   = 2 * time.Second // upper bounds only: a loaded machine is slow, never fast
			)

			// Every BMC hangs: each one must cost exactly one timeout, limit at a time.
			addrs := make([]string, 3*tc.wantLimit)
			for i := range addrs {
				addrs[i] = "hang"
			}

			// The bound, without a race against the timeout: the BMCs hang until ctx
			// ends, so the pool fills up to its limit (a serial or short pool never
			// gets there) and no further (an unbounded one goes past it).
			f := &fakeBMCs{}
			ctx, cancel := context.WithCancel(context.Background())
			swept := make(chan struct{})

			go func() {
				defer close(swept)

				power.Sweep(ctx, targets(addrs...), power.Dialers{power.BackendIPMI: f.dial},
					power.SweepOptions{Concurrency: tc.concurrency, Timeout: time.Hour})
			}()

			for wait := time.Now().Add(10 * time.Second); f.inFlight.Load() < int64(tc.wantLimit) && time.Now().Before(wait); {
				time.Sleep(time.Millisecond)
			}

			time.Sleep(50 * time.Millisecond) // room for an unbounded pool to overshoot
			cancel()
			<-swept

			if m := f.maxSeen.Load(); m != int64(tc.wantLimit) {
				t.Fatalf("at most %d calls in flight, want exactly the limit %d", m, tc.wantLimit)
			}

			f = &fakeBMCs{}

			start := time.Now()
			obs := power.Sweep(context.Background(), targets(addrs...), power.Dialers{power.BackendIPMI: f.dial},
				power.SweepOptions{Concurrency: tc.concurrency, Timeout: timeout})
			took := time.Since(start)

			if m := f.maxSeen.Load(); m > int64(tc.wantLimit) {
				t.Fatalf("%d calls in flight, past the limit %d", m, tc.wantLimit)
			}

			// Three waves of timeouts.
			if took < 3*timeout || took > 3*timeout+slack {
				t.Fatalf("sweep took %s, want about %s (3 waves of %s)", took, 3*timeout, timeout)
			}

			for _, o := range obs {
				if !errors.Is(o.Err, context.DeadlineExceeded) {
					t.Fatalf("%s: err %v, want the per-BMC deadline", o.ID, o.Err)
				}

				if o.Took < timeout || o.Took > timeout+slack {
					t.Fatalf("%s: took %s, want about the %s timeout", o.ID, o.Took, timeout)
				}
			}
		})
	}
}

func TestSweepStopsWithCtx(t *testing.T) {
	f := &fakeBMCs{}

	addrs := make([]string, 100)
	for i := range addrs {
		addrs[i] = "hang"
	}

	ctx, cancel := context.WithCancel(context.Background())

	var wg sync.WaitGroup

	wg.Add(1)

	go func() {
		defer wg.Done()

		for f.inFlight.Load() < 4 {
			time.Sleep(time.Millisecond)
		}

		cancel()
	}()

	start := time.Now()
	obs := power.Sweep(ctx, targets(addrs...), power.Dialers{power.BackendIPMI: f.dial}, power.SweepOptions{Concurrency: 4, Timeout: time.Hour})
	took := time.Since(start)

	wg.Wait()

	if took > time.Second {
		t.Fatalf("sweep returned %s after its ctx ended", took)
	}

	if d := f.dials.Load(); d != 4 {
		t.Fatalf("%d BMCs dialled, want the 4 in flight when ctx ended", d)
	}

	for i, o := range obs {
		if o.ID != fmt.Sprintf("m%d", i) || !errors.Is(o.Err, context.Canceled) {
			t.Fatalf("observation %d: %s err %v, want m%d with ctx's error", i, o.ID, o.Err, i)
		}
	}
}

func TestSweepNoTargets(t *testing.T) {
	if obs := power.Sweep(context.Background(), nil, nil, power.SweepOptions{}); len(obs) != 0 {
		t.Fatalf("%d observations of no targets", len(obs))
	}
}
