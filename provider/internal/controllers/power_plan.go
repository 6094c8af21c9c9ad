package controllers

import (
	"errors"
	"hash/fnv"
	"math/rand/v2"
	"time"

	"github.com/anvil-metal/anvil/provider/internal/power"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// readDue says whether the BMC should be read now: its poll is due, or an action is to
// be decided (a reboot wanted, or the power not known to be where the machine's state
// wants it).
func readDue(s resources.PowerStatusSpec, reboot bool, now, poll time.Time) bool {
	return !now.Before(poll) || s.State != s.Desired || reboot
}

// nextAction is what to do to a machine now, given what is wanted and seen; a reboot
// request wins over the rest, and nothing happens within minInterval of the last action.
func nextAction(desired, observed resources.PowerState, rebootWanted bool, last, now time.Time, minInterval time.Duration) string {
	if desired == "" || (!last.IsZero() && now.Sub(last) < minInterval) {
		return actionNone
	}

	switch {
	case rebootWanted:
		return actionReboot
	case desired == resources.PowerOn && observed == resources.PowerOff:
		return actionOn
	case desired == resources.PowerOff && observed == resources.PowerOn:
		return actionOff
	}

	return actionNone
}

// nextWake is when a machine with nothing to do now wants looking at again: its next
// poll, or sooner the end of the rate limit that holds back an action it wants.
func (ctrl *PowerController) nextWake(s resources.PowerStatusSpec, reboot bool, now, poll time.Time) time.Time {
	wake := poll

	held := !s.LastActionAt.IsZero() && now.Sub(s.LastActionAt) < ctrl.MinActionInterval
	wants := reboot || (s.State != s.Desired && s.State != resources.PowerUnknown)

	if held && wants {
		if end := s.LastActionAt.Add(ctrl.MinActionInterval); end.Before(wake) {
			wake = end
		}
	}

	return wake
}

// retryAt is when machine id's failing BMC may be tried again: the last attempt, plus a
// wait that doubles with each failure in a row, jittered by up to ±1/backoffJitter of it
// and never past backoffMax. Zero when it is not failing.
func retryAt(id string, s resources.PowerStatusSpec) time.Time {
	if s.Failures == 0 {
		return time.Time{}
	}

	last := s.ObservedAt
	if s.LastActionAt.After(last) {
		last = s.LastActionAt
	}

	wait := min(backoffBase<<min(s.Failures, 10), backoffMax)
	wait += jitter(id, s.Failures, wait/backoffJitter)

	// Reflected below the cap rather than clamped to it: clamping would retry every
	// capped BMC whose jitter came out positive at the same instant again.
	if wait > backoffMax {
		wait = 2*backoffMax - wait
	}

	return last.Add(wait)
}

// jitter is a spread in [-span, span] fixed by the machine and the attempt, so BMCs that
// failed together (a switch or a PDU down) do not retry together, and the same machine
// and attempt always wait the same (tests, restarts) without a shared random source.
func jitter(id string, attempt uint32, span time.Duration) time.Duration {
	if span <= 0 {
		return 0
	}

	h := fnv.New64a()
	h.Write([]byte(id))

	r := rand.New(rand.NewPCG(h.Sum64(), uint64(attempt))) //nolint:gosec // a spread, not a secret

	return time.Duration(r.Int64N(int64(2*span+1))) - span
}

// failed records a BMC failure on the status.
func failed(s *resources.PowerStatusSpec, err error) {
	s.Failures++
	s.Error = err.Error()
	s.State = resources.PowerUnknown

	switch {
	case errors.Is(err, power.ErrUnauthorized):
		s.Condition = conditionUnauthorized
	case errors.Is(err, power.ErrUnreachable):
		s.Condition = conditionUnreachable
	case errors.Is(err, power.ErrUnsupported):
		s.Condition = conditionUnsupported
	default:
		s.Condition = conditionError
	}
}

func succeeded(s *resources.PowerStatusSpec) {
	s.Failures, s.Error, s.Condition = 0, "", conditionOK
}
