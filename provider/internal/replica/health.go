package replica

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Health timing: a probe a second, each bounded, and the age past which a replica that
// has not reached etcd stops serving.
const (
	probeEvery   = time.Second
	probeTimeout = 2 * time.Second
	// DefaultStaleAfter is how long a replica serves machines from its view after etcd
	// last answered it. Beyond it a deallocated machine could be sent to its disk from a
	// stale view instead of to its wipe, so the replica goes unready and stops answering.
	DefaultStaleAfter = 3 * time.Second
)

// Health tells whether this replica reaches etcd: a linearizable read (one that goes
// through the raft leader, so a member cut off from its quorum fails it) every second.
type Health struct {
	Client *clientv3.Client
	// Key is read by the probe.
	Key string
	// StaleAfter is how long after the last good probe the replica stays ready
	// (0: DefaultStaleAfter).
	StaleAfter time.Duration
	Metrics    *Metrics
	Logger     *zap.Logger

	last atomic.Int64 // unix nanoseconds of the last good probe, 0 before the first
}

// Run probes until ctx is done.
func (h *Health) Run(ctx context.Context) error {
	ticker := time.NewTicker(probeEvery)
	defer ticker.Stop()

	wasReady := true

	for {
		h.probe(ctx)

		ready := h.Ready() == nil
		h.Metrics.setReady(ready)

		if ready != wasReady {
			if ready {
				h.Logger.Info("etcd answers again: serving machines")
			} else {
				h.Logger.Warn("etcd does not answer: not serving machines until it does", zap.Error(h.Ready()))
			}

			wasReady = ready
		}

		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

func (h *Health) probe(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()

	start := time.Now()

	_, err := h.Client.Get(ctx, h.Key)
	h.Metrics.probed(time.Since(start).Seconds(), err == nil)

	if err == nil {
		h.last.Store(time.Now().UnixNano())
	}
}

// Ready errs while the replica must not serve machines: etcd not reached within
// StaleAfter.
func (h *Health) Ready() error {
	stale := h.StaleAfter
	if stale <= 0 {
		stale = DefaultStaleAfter
	}

	last := h.last.Load()
	if last == 0 {
		return fmt.Errorf("etcd not reached yet")
	}

	if age := time.Since(time.Unix(0, last)); age > stale {
		return fmt.Errorf("etcd last answered %s ago", age.Round(100*time.Millisecond))
	}

	return nil
}
