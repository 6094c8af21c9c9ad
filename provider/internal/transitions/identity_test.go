package transitions_test

import (
	"strings"
	"testing"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/provider/internal/resources"
	"github.com/anvil-metal/anvil/provider/internal/transitions"
)

// Two EK fingerprints.
var (
	ekA = "sha256:" + strings.Repeat("a1", 32)
	ekB = "sha256:" + strings.Repeat("b2", 32)
)

// recordEK records ek as the machine's proven EK, as MachineController does.
func recordEK(t *testing.T, st *resources.Store, ek string) {
	t.Helper()

	_, err := safe.StateUpdateWithConflicts(t.Context(), st, resources.NewMachine(machineID).Metadata(), func(m *resources.Machine) error {
		m.TypedSpec().EK = ek

		return nil
	})
	require.NoError(t, err)
}

func intentOf(t *testing.T, st *resources.Store) resources.MachineIntentSpec {
	t.Helper()

	in, err := safe.StateGetByID[*resources.MachineIntent](t.Context(), st, machineID)
	if err != nil {
		return *resources.NewMachineIntent(machineID).TypedSpec()
	}

	return *in.TypedSpec()
}

// TestAcceptBindsEK: acceptance binds the EK the machine's agent proved, or the one a
// person expects, refusing when they disagree; --require-tpm refuses a machine without.
func TestAcceptBindsEK(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name       string
		recorded   string
		accepted   string // the machine was accepted before, bound to this ("-": unbound)
		expected   string // --ek
		requireTPM bool
		code       transitions.Code
		bound      string
	}{
		{name: "the recorded EK is bound", recorded: ekA, bound: ekA},
		{name: "the expected EK matches the recorded one", recorded: ekA, expected: ekA, bound: ekA},
		{name: "the expected EK is typed another way", recorded: ekA, expected: strings.ToUpper(ekA), bound: ekA},
		{name: "the expected EK differs from the recorded one", recorded: ekA, expected: ekB, code: transitions.CodeRefused},
		{name: "pre-registered: no EK recorded yet, the expected one is bound", expected: ekB, bound: ekB},
		{name: "no TPM: nothing bound", bound: ""},
		{name: "no TPM, --require-tpm", requireTPM: true, code: transitions.CodeRefused},
		{name: "no TPM recorded, --require-tpm, an expected EK", requireTPM: true, expected: ekB, bound: ekB},
		{name: "a TPM, --require-tpm", requireTPM: true, recorded: ekA, bound: ekA},
		{name: "a malformed EK", expected: "sha256:xyz", code: transitions.CodeInvalid},
		{name: "accepted and bound: another EK is refused", recorded: ekA, accepted: ekA, expected: ekB, code: transitions.CodeRefused},
		{name: "accepted and bound: the same EK again", recorded: ekA, accepted: ekA, expected: ekA, bound: ekA},
		{name: "accepted unbound: a person binds its EK", recorded: ekA, accepted: "-", expected: ekA, bound: ekA},
		{name: "accepted unbound: accepting again changes nothing", recorded: ekA, accepted: "-", bound: ""},
		{name: "accepted without TPM, --require-tpm: accepting again is no news", accepted: "-", requireTPM: true, bound: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			st := openState(t)
			tr := transitions.New(st, transitions.Options{RequireTPM: tc.requireTPM})

			if tc.accepted != "" {
				in := resources.NewMachineIntent(machineID)
				in.TypedSpec().Acceptance = resources.AcceptanceAccepted
				in.TypedSpec().BoundEK = strings.TrimPrefix(tc.accepted, "-")
				require.NoError(t, st.Create(t.Context(), in))
			}

			recordEK(t, st, tc.recorded)

			before := intentOf(t, st)

			got, err := tr.AcceptWith(t.Context(), machineID, transitions.AcceptRequest{EK: tc.expected})
			require.Equal(t, tc.code, codeOf(err), "%v", err)

			if tc.code != notRefused {
				assert.Equal(t, before, intentOf(t, st), "a refused acceptance changes nothing")

				return
			}

			assert.Equal(t, resources.AcceptanceAccepted, got.Acceptance)
			assert.Equal(t, tc.bound, got.BoundEK)
			assert.Equal(t, tc.bound, intentOf(t, st).BoundEK)
		})
	}
}

// TestAcceptPendingIdentity: auto-accept accepts only a machine that proved a TPM
// identity, binding it, unless told to accept machines without; --require-tpm wins.
func TestAcceptPendingIdentity(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name     string
		recorded string
		opts     transitions.Options
		accepted bool
	}{
		{name: "a proven TPM", recorded: ekA, accepted: true},
		{name: "no TPM", accepted: false},
		{name: "no TPM, --auto-accept-without-tpm", opts: transitions.Options{AutoAcceptWithoutTPM: true}, accepted: true},
		{name: "no TPM, --auto-accept-without-tpm and --require-tpm", opts: transitions.Options{AutoAcceptWithoutTPM: true, RequireTPM: true}},
		{name: "a proven TPM, --require-tpm", recorded: ekA, opts: transitions.Options{RequireTPM: true}, accepted: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			st := openState(t)
			recordEK(t, st, tc.recorded)

			accepted, err := transitions.New(st, tc.opts).AcceptPending(t.Context(), machineID, "all")
			require.NoError(t, err)
			assert.Equal(t, tc.accepted, accepted)

			in := intentOf(t, st)
			if !tc.accepted {
				assert.Equal(t, resources.AcceptancePending, in.Acceptance)

				return
			}

			assert.Equal(t, resources.AcceptanceAccepted, in.Acceptance)
			assert.Equal(t, tc.recorded, in.BoundEK)
		})
	}
}

// TestApplyOmniBindsEK: Omni's acceptance binds the recorded EK as a person's does, and
// --require-tpm refuses it for a machine without one.
func TestApplyOmniBindsEK(t *testing.T) {
	t.Parallel()

	accept := resources.OmniMachineSpec{Acceptance: resources.AcceptanceAccepted}

	st := openState(t)
	recordEK(t, st, ekA)

	got, err := transitions.New(st, transitions.Options{ManagedBy: "Omni"}).Owner().ApplyOmni(t.Context(), machineID, accept)
	require.NoError(t, err)
	assert.Equal(t, ekA, got.BoundEK)

	st = openState(t)

	_, err = transitions.New(st, transitions.Options{ManagedBy: "Omni", RequireTPM: true}).Owner().ApplyOmni(t.Context(), machineID, accept)
	assert.Equal(t, transitions.CodeRefused, codeOf(err))
	assert.Equal(t, resources.AcceptancePending, intentOf(t, st).Acceptance)
}
