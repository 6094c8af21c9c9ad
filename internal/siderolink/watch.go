package siderolink

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// errOmniGone says Options.Reprovision delivered: Omni's end of the link went away.
var errOmniGone = errors.New("the end of the link at Omni went away (Omni restarted?)")

// watch reads the peer's last handshake every CheckEvery until the link is stale (see
// stale) or gone, or Reprovision delivers, and says why; it returns when ctx ends too.
func (r *runner) watch(ctx context.Context, t tunnel, peer wgtypes.Key, configured time.Time) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-r.opts.Reprovision:
			return errOmniGone
		case <-r.opts.clock.After(r.opts.CheckEvery):
		}

		last, err := t.LastHandshake(peer)
		if err != nil {
			return err
		}

		if err := stale(r.opts.clock.Now(), configured, last, r.opts.FirstHandshakeWithin, r.opts.StaleAfter); err != nil {
			return err
		}
	}
}

// stale says why a link configured at configured, whose last handshake was at last, is
// down at now: no handshake within first of its configuration, or none for longer than
// after since the last one. nil means the link is up.
func stale(now, configured, last time.Time, first, after time.Duration) error {
	if last.Before(configured) {
		// No handshake on this configuration (a handshake before it was with the old
		// peer: configuring replaces the peer).
		if d := now.Sub(configured); d > first {
			return fmt.Errorf("no handshake in the %s since the link was configured", d.Round(time.Second))
		}

		return nil
	}

	if d := now.Sub(last); d > after {
		return fmt.Errorf("no handshake for %s", d.Round(time.Second))
	}

	return nil
}

// sleep waits d on the runner's clock; false when ctx ended first.
func (r *runner) sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-r.opts.clock.After(d):
		return true
	}
}

// clock is the time, which tests drive.
type clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
