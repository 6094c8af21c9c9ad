package power

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Target is one machine's BMC to poll.
type Target struct {
	ID       string
	Endpoint Endpoint
}

// Observation is what polling one target found.
type Observation struct {
	ID string
	// On is whether the machine is powered on (when Err is nil).
	On   bool
	Err  error
	Took time.Duration
}

// SweepOptions bound a sweep.
type SweepOptions struct {
	// Concurrency is the most BMCs talked to at once (0: DefaultConcurrency).
	Concurrency int
	// Timeout bounds each BMC: dial, read, close (0: DefaultTimeout).
	Timeout time.Duration
}

// Sweep reads the power state of every target, at most opts.Concurrency at a time, each
// bounded by opts.Timeout, so that one dead BMC costs one slot for one timeout rather
// than the whole sweep. Observations come back in target order. When ctx ends, targets
// not yet started are reported with ctx's error and Sweep returns once the ones in
// flight give up, which their ctx makes them do.
func Sweep(ctx context.Context, targets []Target, dial Dialers, opts SweepOptions) []Observation {
	workers := opts.Concurrency
	if workers <= 0 {
		workers = DefaultConcurrency
	}

	workers = min(workers, len(targets))

	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}

	obs := make([]Observation, len(targets))
	next := make(chan int)

	var wg sync.WaitGroup

	for range workers {
		wg.Add(1)

		go func() {
			defer wg.Done()

			for i := range next {
				if ctx.Err() != nil {
					// Handed out in the same instant ctx ended.
					obs[i] = notPolled(ctx, targets[i])

					continue
				}

				obs[i] = observe(ctx, targets[i], dial, timeout)
			}
		}()
	}

	handed := 0

feed:
	for ; handed < len(targets); handed++ {
		select {
		case next <- handed:
		case <-ctx.Done():
			break feed
		}
	}

	close(next)
	wg.Wait()

	for i := handed; i < len(targets); i++ {
		obs[i] = notPolled(ctx, targets[i])
	}

	return obs
}

func notPolled(ctx context.Context, t Target) Observation {
	return Observation{ID: t.ID, Err: fmt.Errorf("sweep stopped before polling %s: %w", t.Endpoint, ctx.Err())}
}

func observe(ctx context.Context, t Target, dial Dialers, timeout time.Duration) Observation {
	start := time.Now()

	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	on, err := pollState(ctx, t.Endpoint, dial)

	return Observation{ID: t.ID, On: on, Err: err, Took: time.Since(start)}
}

func pollState(ctx context.Context, ep Endpoint, dial Dialers) (bool, error) {
	c, err := dial.Dial(ctx, ep)
	if err != nil {
		return false, err
	}

	defer c.Close()

	on, err := c.PowerState(ctx)
	if err != nil {
		return false, fmt.Errorf("error reading the power state from %s: %w", ep, err)
	}

	return on, nil
}
