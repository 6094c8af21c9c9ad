//go:build lab

package ha

import (
	"context"
	"net/http"
	"sync"
	"time"
)

// readySample is one answer of a replica's /readyz (code 0: no answer).
type readySample struct {
	at   time.Time
	code int
}

// interval is a span of time.
type interval struct{ from, to time.Time }

func (i interval) length() time.Duration { return i.to.Sub(i.from) }

// readySampler asks every replica's /readyz every period until stopped.
type readySampler struct {
	stop   chan struct{}
	wg     sync.WaitGroup
	mu     sync.Mutex
	series [][]readySample
}

// sampleReady starts sampling every replica's /readyz every period.
func (c *chaosLab) sampleReady(ctx context.Context, period time.Duration) *readySampler {
	r := &readySampler{stop: make(chan struct{}), series: make([][]readySample, len(c.s.Replicas))}

	for i := range c.s.Replicas {
		r.wg.Go(func() {
			ticker := time.NewTicker(period)
			defer ticker.Stop()

			for {
				rctx, cancel := context.WithTimeout(ctx, time.Second)
				code := c.ready(rctx, i)

				cancel()

				r.mu.Lock()
				r.series[i] = append(r.series[i], readySample{at: time.Now(), code: code})
				r.mu.Unlock()

				select {
				case <-r.stop:
					return
				case <-ctx.Done():
					return
				case <-ticker.C:
				}
			}
		})
	}

	return r
}

// Stop ends the sampling and returns each replica's unready spans: from its first
// sample that was not 200 to the next that was (or its last sample).
func (r *readySampler) Stop() [][]interval {
	close(r.stop)
	r.wg.Wait()

	r.mu.Lock()
	defer r.mu.Unlock()

	spans := make([][]interval, len(r.series))

	for i, series := range r.series {
		var open *interval

		for _, s := range series {
			switch {
			case s.code != http.StatusOK && open == nil:
				open = &interval{from: s.at, to: s.at}
			case s.code != http.StatusOK:
				open.to = s.at
			case open != nil:
				open.to = s.at
				spans[i] = append(spans[i], *open)
				open = nil
			}
		}

		if open != nil {
			spans[i] = append(spans[i], *open)
		}
	}

	return spans
}

// longest is the longest span, and its replica (-1: none).
func longest(spans [][]interval) (int, time.Duration) {
	who, d := -1, time.Duration(0)

	for i, ss := range spans {
		for _, s := range ss {
			if s.length() > d || who < 0 {
				who, d = i, s.length()
			}
		}
	}

	return who, d
}

// noneReady is the longest span during which every replica was unready at once.
func noneReady(spans [][]interval) time.Duration {
	if len(spans) == 0 {
		return 0
	}

	common := spans[0]
	for _, ss := range spans[1:] {
		common = intersect(common, ss)
	}

	var d time.Duration
	for _, s := range common {
		d = max(d, s.length())
	}

	return d
}

// intersect is the spans both a and b cover.
func intersect(a, b []interval) []interval {
	var out []interval

	for _, x := range a {
		for _, y := range b {
			from, to := x.from, x.to
			if y.from.After(from) {
				from = y.from
			}

			if y.to.Before(to) {
				to = y.to
			}

			if to.After(from) {
				out = append(out, interval{from, to})
			}
		}
	}

	return out
}
