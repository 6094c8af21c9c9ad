package agentapi

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "github.com/anvil-metal/anvil/api/agent/v1"
	"github.com/anvil-metal/anvil/provider/internal/controllers"
	"github.com/anvil-metal/anvil/provider/internal/identity"
	"github.com/anvil-metal/anvil/provider/internal/tamper"
)

// activationTimeout bounds the agent's answer to its identity challenge: a TPM's
// credential activation takes well under a second.
const activationTimeout = 30 * time.Second

// maxFailureLogged bounds the agent's own words on why its TPM could not answer.
const maxFailureLogged = 256

// errIdentity is every identity refusal's status: one fixed message, whatever failed,
// so that a prober learns nothing of what the provider expected.
var errIdentity = status.Error(codes.Unauthenticated, "TPM identity not proven")

// EKRecorder records the EK a machine's agent proved (MachineController): the first
// one stays, another is refused with controllers.ErrOtherEK.
type EKRecorder interface {
	RecordEK(ctx context.Context, machineID, ek string) error
}

// prove is the identity rule of a session, run once its token is valid (SECURITY.md,
// "Machine identity"). The EK a machine must prove is the one bound at its acceptance,
// else the one recorded at its first registration with a TPM (identity.Expected):
//
//   - none expected: an agent without a TPM is welcome (identity "none"); one with a
//     TPM proves it, and its EK is recorded.
//   - one expected: the agent must show that EK and prove it.
//
// Proving is credential activation: the provider sends a challenge only the TPM holding
// the EK and the AK shown can open, around a secret fresh for this session, and checks
// the secret the agent sends back. Every failure — no TPM, another EK, a malformed
// identity, a wrong or missing answer — refuses the session with one fixed message and
// raises a security event (tamper.IdentityMismatch) that holds the machine. A first EK
// is never replaced: another presented later is such a failure.
func (s *Server) prove(stream agentv1.AgentService_SessionServer, hello *agentv1.Hello) error {
	ctx := stream.Context()
	id := hello.GetMachineId()

	var bound, recorded string

	if e := s.opts.View.Get(id); e != nil {
		if e.Intent != nil {
			bound = e.Intent.BoundEK
		}

		if e.Machine != nil {
			recorded = e.Machine.EK
		}
	}

	expected := identity.Expected(bound, recorded)
	which := "recorded"

	if bound != "" {
		which = "bound"
	}

	shown := hello.GetTpm()
	if shown == nil {
		if expected == "" {
			return nil
		}

		return s.refuseIdentity(ctx, id, fmt.Sprintf("its agent showed no TPM, where TPM EK %s is %s", expected, which))
	}

	claim, err := identity.ParseClaim(shown)
	if err != nil {
		return s.refuseIdentity(ctx, id, "its agent showed a malformed TPM identity: "+err.Error())
	}

	if expected != "" && claim.Fingerprint != expected {
		return s.refuseIdentity(ctx, id, fmt.Sprintf("its agent showed TPM EK %s, where EK %s is %s", claim.Fingerprint, expected, which))
	}

	challenge, err := claim.Challenge()
	if err != nil {
		return status.Errorf(codes.Internal, "error making the identity challenge: %v", err)
	}

	if err = stream.Send(&agentv1.ProviderMessage{Message: &agentv1.ProviderMessage_Challenge{Challenge: challenge.Message}}); err != nil {
		return err //nolint:wrapcheck // the stream's status
	}

	answer, err := s.activation(stream)
	if err != nil {
		return s.refuseIdentity(ctx, id, fmt.Sprintf("its agent did not answer the challenge for TPM EK %s: %v", claim.Fingerprint, err))
	}

	if why := answer.GetFailure(); why != "" {
		if len(why) > maxFailureLogged {
			why = strings.ToValidUTF8(why[:maxFailureLogged], "")
		}

		return s.refuseIdentity(ctx, id, fmt.Sprintf("its agent's TPM could not answer the challenge for EK %s: %q", claim.Fingerprint, why))
	}

	if err = challenge.Verify(answer); err != nil {
		return s.refuseIdentity(ctx, id, fmt.Sprintf("its agent's answer to the challenge for TPM EK %s is wrong: it does not hold that TPM", claim.Fingerprint))
	}

	return s.recordEK(ctx, id, claim.Fingerprint, bound, recorded)
}

// recordEK records a proven EK when none is recorded. Another recorded meanwhile (two
// agents racing for one machine) refuses the session, unless the EK proven is the one
// bound, which wins over a recorded one.
func (s *Server) recordEK(ctx context.Context, id, ek, bound, recorded string) error {
	logger := s.opts.Logger.With(zap.String("machine", id), zap.String("ek", ek))

	if recorded != "" || s.opts.EKs == nil {
		logger.Debug("agent proved its TPM identity")

		return nil
	}

	err := s.opts.EKs.RecordEK(ctx, id, ek)

	switch {
	case err == nil:
		logger.Info("agent proved its TPM identity: EK recorded")

		return nil
	case errors.Is(err, controllers.ErrOtherEK) && ek == bound:
		logger.Warn("agent proved its bound TPM identity; another EK is recorded for the machine", zap.Error(err))

		return nil
	case errors.Is(err, controllers.ErrOtherEK):
		return s.refuseIdentity(ctx, id, fmt.Sprintf("its agent proved TPM EK %s, but %v", ek, err))
	default:
		return status.Errorf(codes.Unavailable, "error recording the TPM identity: %v", err)
	}
}

// activation waits for the agent's answer to its challenge.
func (s *Server) activation(stream agentv1.AgentService_SessionServer) (*agentv1.Activation, error) {
	msg, err := recvWithin(stream, activationTimeout)

	switch {
	case errors.Is(err, errNoMessage):
		return nil, fmt.Errorf("no answer within %s", activationTimeout)
	case err != nil:
		return nil, err
	}

	if a := msg.GetActivation(); a != nil {
		return a, nil
	}

	return nil, errors.New("its next message was not an activation")
}

// refuseIdentity refuses the session and raises the security event, which holds the
// machine.
func (s *Server) refuseIdentity(ctx context.Context, id, detail string) error {
	s.metrics.refused.WithLabelValues("identity").Inc()

	remote := remote(ctx)
	s.opts.Logger.Warn("agent refused: TPM identity not proven", zap.String("machine", id), zap.String("remote", remote), zap.String("detail", detail))

	// The event outlives the refused session: holding the machine must not be cut short
	// by the agent hanging up.
	if err := s.opts.Tamper.Report(context.WithoutCancel(ctx), tamper.Event{
		Machine: id, Kind: tamper.IdentityMismatch, Remote: remote, Detail: detail, Hold: true,
	}); err != nil {
		s.opts.Logger.Warn("error raising the identity security event", zap.String("machine", id), zap.Error(err))
	}

	return errIdentity
}
