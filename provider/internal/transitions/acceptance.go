package transitions

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// Accept hands a pending or rejected machine to the provider. Acceptance owes a wipe,
// unless skipWipe says the machine holds nothing: whatever was on the disks is not
// handed to the next user. It binds the machine's TPM identity (identity.go).
func (s *Service) Accept(ctx context.Context, id string, skipWipe bool) (*resources.MachineIntentSpec, error) {
	return s.AcceptWith(ctx, id, AcceptRequest{SkipWipe: skipWipe})
}

// AcceptRequest is what a person accepts a machine with.
type AcceptRequest struct {
	// SkipWipe accepts without the initial wipe (the machine holds nothing).
	SkipWipe bool
	// EK is the fingerprint (sha256:<hex>) of the TPM endorsement key the machine must
	// prove: it must match the one its agent proved, if any, and is bound either way.
	EK string
}

// AcceptWith is Accept with the request's EK: see AcceptRequest and identity.go.
func (s *Service) AcceptWith(ctx context.Context, id string, req AcceptRequest) (*resources.MachineIntentSpec, error) {
	if err := s.owned("accept"); err != nil {
		return nil, err
	}

	expected, err := parseExpectedEK(req.EK)
	if err != nil {
		return nil, err
	}

	// The recorded EK is never replaced, so it may be read before the lock.
	recorded, err := s.recordedEK(ctx, id)
	if err != nil {
		return nil, err
	}

	return s.transition(ctx, "accept", id, func(spec *resources.MachineIntentSpec) error {
		bound, err := bindEK(id, *spec, recorded, expected, s.requireTPM)
		if err != nil {
			return err
		}

		accept(spec, req.SkipWipe)
		spec.BoundEK = bound

		return nil
	}, zap.String("expected_ek", expected))
}

// accept is the acceptance rule both Accept and AcceptPending apply: accepting an
// accepted machine changes nothing, otherwise a wipe is owed unless skipped.
func accept(spec *resources.MachineIntentSpec, skipWipe bool) {
	if spec.Acceptance == resources.AcceptanceAccepted {
		return
	}

	spec.Acceptance = resources.AcceptanceAccepted

	if !skipWipe {
		spec.WipeID = NewID()
	}
}

// errNotPending is how AcceptPending's change refuses a machine that is no longer pending.
var errNotPending = errors.New("machine is not pending")

// AcceptPending accepts a machine for the provider itself (--auto-accept), by the rule
// Accept applies, with the initial wipe owed; reason says why, for the log. Only a
// pending machine is accepted — never a rejected one, whose rejection a person decided —
// and that is checked under the transitions' lock, so a rejection made since the caller
// looked wins. It reports whether the machine was accepted.
//
// Only a machine whose agent proved a TPM identity is accepted (its EK bound), unless
// AutoAcceptWithoutTPM (and not RequireTPM) lets one without be: a stranger's made-up
// machine must at least hold one key of its own for good.
func (s *Service) AcceptPending(ctx context.Context, id, reason string) (bool, error) {
	if err := s.owned("auto-accept"); err != nil {
		return false, err
	}

	recorded, err := s.recordedEK(ctx, id)
	if err != nil {
		return false, err
	}

	if recorded == "" && (s.requireTPM || !s.autoAcceptWithoutTPM) {
		s.logger.Info("not auto-accepted: the machine has no TPM identity (--auto-accept-without-tpm accepts such machines)",
			zap.String("machine", id))

		return false, nil
	}

	_, err = s.transition(ctx, "auto-accept", id, func(spec *resources.MachineIntentSpec) error {
		if spec.Acceptance != resources.AcceptancePending {
			return errNotPending
		}

		bound, err := bindEK(id, *spec, recorded, "", s.requireTPM)
		if err != nil {
			return err
		}

		accept(spec, false)
		spec.BoundEK = bound

		return nil
	}, zap.String("reason", reason), zap.String("bound_ek", recorded))

	switch {
	case errors.Is(err, errNotPending):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("error accepting machine %s: %w", id, err)
	}

	return true, nil
}

// Reject keeps the provider off a machine; it stays listed as rejected.
func (s *Service) Reject(ctx context.Context, id string) (*resources.MachineIntentSpec, error) {
	if err := s.owned("reject"); err != nil {
		return nil, err
	}

	return s.transition(ctx, "reject", id, func(spec *resources.MachineIntentSpec) error {
		if spec.Allocation != nil {
			return refused(fmt.Sprintf("machine %q is allocated: deallocate it before rejecting it", id))
		}

		spec.Acceptance = resources.AcceptanceRejected

		return nil
	})
}
