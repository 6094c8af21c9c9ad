package transitions

import (
	"context"
	"fmt"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"

	"github.com/anvil-metal/anvil/internal/tpmid"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// The identity rules of acceptance (SECURITY.md, "Machine identity"):
//
//   - Acceptance binds the machine's TPM identity: the EK its agent proved at its first
//     registration (Machine's EK), or the one a person accepts it with (pre-registered
//     from a vendor's list, say), which must then match the recorded one if there is one.
//     Every later session of its agent must prove the bound EK.
//   - A machine accepted already keeps its binding; a person may bind one that has none
//     by accepting it again with its EK, never replace one.
//   - With RequireTPM, a machine that neither proved an EK nor is accepted with one is
//     not accepted, by a person, by auto-accept or by Omni.
//   - Auto-accept accepts only a machine whose agent proved an EK, unless
//     AutoAcceptWithoutTPM says machines without a TPM may be auto-accepted too.

// recordedEK is the EK fingerprint the machine's agent proved, "" when none did or the
// machine is not known (the transition then refuses it as not found).
func (s *Service) recordedEK(ctx context.Context, id string) (string, error) {
	m, err := safe.StateGetByID[*resources.Machine](ctx, s.st, id)

	switch {
	case state.IsNotFoundError(err):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("error reading machine %q: %w", id, err)
	}

	return m.TypedSpec().EK, nil
}

// bindEK is the EK acceptance binds, from the current intent, the EK recorded and the
// one a person expects ("" for none): an error when they disagree, or when RequireTPM
// finds none to bind to a machine being accepted.
func bindEK(id string, cur resources.MachineIntentSpec, recorded, expected string, requireTPM bool) (string, error) {
	switch {
	case expected != "" && recorded != "" && expected != recorded:
		return "", refused(fmt.Sprintf("machine %q: its agent proved TPM EK %s, not %s: "+
			"another machine (or another TPM) registered as it, or the expected EK is wrong", id, recorded, expected))
	case expected != "" && cur.BoundEK != "" && expected != cur.BoundEK:
		return "", refused(fmt.Sprintf("machine %q is bound to TPM EK %s, not %s", id, cur.BoundEK, expected))
	}

	bound := cur.BoundEK

	switch {
	case bound != "":
	case expected != "":
		bound = expected
	case cur.Acceptance != resources.AcceptanceAccepted:
		bound = recorded
	}

	if bound == "" && requireTPM && cur.Acceptance != resources.AcceptanceAccepted {
		return "", refused(fmt.Sprintf("machine %q has no TPM identity (its agent proved no EK) and this provider "+
			"requires one (--require-tpm): accept it with its EK (--ek sha256:…) to bind one", id))
	}

	return bound, nil
}

// parseExpectedEK reads the EK a person accepts a machine with ("" for none).
func parseExpectedEK(ek string) (string, error) {
	if ek == "" {
		return "", nil
	}

	fp, err := tpmid.ParseFingerprint(ek)
	if err != nil {
		return "", invalid(err)
	}

	return fp, nil
}
