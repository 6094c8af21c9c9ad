// Package loadgen is an open-loop HTTP load generator: requests are due at a fixed rate
// whether or not earlier ones have been answered, and each latency is measured from the
// moment the request was due (so a stalled server is not hidden by a stalled client, the
// "coordinated omission" of closed-loop tools).
package loadgen

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Config configures a run.
type Config struct {
	// BaseURL is scheme://host:port.
	BaseURL string
	// Path returns the path (with query) of request i; called from many goroutines.
	Path func(r *rand.Rand) string
	// Rate is requests per second; Duration how long requests are issued.
	Rate     int
	Duration time.Duration
	// Workers bounds the requests in flight (and the connections).
	Workers int
	// Timeout bounds one request.
	Timeout time.Duration
}

// Result is what a run measured. Latencies are in microseconds.
type Result struct {
	Due       int64   `json:"due"`
	OK        int64   `json:"ok"`
	Non200    int64   `json:"non200"`
	Errors    int64   `json:"errors"`
	Achieved  float64 `json:"achievedPerSecond"`
	P50us     float64 `json:"p50us"`
	P90us     float64 `json:"p90us"`
	P99us     float64 `json:"p99us"`
	P999us    float64 `json:"p999us"`
	MaxUs     float64 `json:"maxUs"`
	FirstErr  string  `json:"firstError,omitempty"`
	ElapsedMs int64   `json:"elapsedMs"`
}

// Run issues Rate*Duration requests, then waits (bounded by Timeout) for the last
// answers.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if cfg.Rate <= 0 || cfg.Duration <= 0 || cfg.Workers <= 0 {
		return nil, fmt.Errorf("invalid load: rate %d, duration %s, workers %d", cfg.Rate, cfg.Duration, cfg.Workers)
	}

	total := int(float64(cfg.Rate) * cfg.Duration.Seconds())
	interval := time.Second / time.Duration(cfg.Rate)

	client := &http.Client{
		Timeout: cfg.Timeout,
		Transport: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: cfg.Timeout}).DialContext,
			MaxIdleConns:        cfg.Workers,
			MaxIdleConnsPerHost: cfg.Workers,
			MaxConnsPerHost:     cfg.Workers,
			DisableCompression:  true,
			IdleConnTimeout:     time.Minute,
		},
	}
	defer client.CloseIdleConnections()

	// The queue holds every due time: the scheduler never blocks on busy workers.
	due := make(chan time.Time, total)
	latencies := make([]time.Duration, total)

	var (
		n                  atomic.Int64
		ok, non200, failed atomic.Int64
		firstErr           atomic.Value
		wg                 sync.WaitGroup
	)

	ctx, cancel := context.WithTimeout(ctx, cfg.Duration+cfg.Timeout+5*time.Second)
	defer cancel()

	for w := range cfg.Workers {
		wg.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano()))) //nolint:gosec // a load pattern, not a secret; the bits of the seed are all that count
			buf := make([]byte, 32<<10)

			for at := range due {
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.BaseURL+cfg.Path(rnd), nil)
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())

					continue
				}

				resp, err := client.Do(req)
				if err == nil {
					for {
						if _, rerr := resp.Body.Read(buf); rerr != nil {
							if rerr != io.EOF {
								err = rerr
							}

							break
						}
					}

					resp.Body.Close()
				}

				lat := time.Since(at)
				latencies[n.Add(1)-1] = lat

				switch {
				case err != nil:
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				case resp.StatusCode != http.StatusOK:
					non200.Add(1)
				default:
					ok.Add(1)
				}
			}
		})
	}

	start := time.Now()

	for i := range total {
		at := start.Add(time.Duration(i) * interval)
		if d := time.Until(at); d > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(d):
			}
		}

		if ctx.Err() != nil {
			break
		}

		due <- at
	}

	close(due)
	wg.Wait()

	elapsed := time.Since(start)
	lats := latencies[:n.Load()]
	slices.Sort(lats)

	res := &Result{
		Due:       int64(total),
		OK:        ok.Load(),
		Non200:    non200.Load(),
		Errors:    failed.Load(),
		Achieved:  float64(len(lats)) / elapsed.Seconds(),
		P50us:     pct(lats, 0.50),
		P90us:     pct(lats, 0.90),
		P99us:     pct(lats, 0.99),
		P999us:    pct(lats, 0.999),
		ElapsedMs: elapsed.Milliseconds(),
	}

	if len(lats) > 0 {
		res.MaxUs = us(lats[len(lats)-1])
	}

	if v, _ := firstErr.Load().(string); v != "" {
		res.FirstErr = v
	}

	return res, nil
}

// pct is the nearest-rank percentile of sorted.
func pct(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}

	i := int(float64(len(sorted))*p+0.999999) - 1
	i = min(max(i, 0), len(sorted)-1)

	return us(sorted[i])
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
