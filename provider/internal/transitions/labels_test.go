package transitions_test

import (
	"testing"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/provider/internal/resources"
	"github.com/anvil-metal/anvil/provider/internal/transitions"
)

func TestSetLabels(t *testing.T) {
	t.Parallel()

	st := openState(t)
	tr := transitions.New(st, transitions.Options{})

	// Steps run in order on one machine; each says what the user labels are after it.
	for _, step := range []struct {
		name   string
		set    map[string]string
		remove []string
		code   transitions.Code
		want   map[string]string
	}{
		{name: "set", set: map[string]string{"team": "storage", "example.com/tier": "gold"}, want: map[string]string{"team": "storage", "example.com/tier": "gold"}},
		{name: "replace and add", set: map[string]string{"team": "db", "empty": ""}, want: map[string]string{"team": "db", "example.com/tier": "gold", "empty": ""}},
		{name: "remove, unknown key too", remove: []string{"empty", "nosuch"}, want: map[string]string{"team": "db", "example.com/tier": "gold"}},
		{name: "reserved prefix", set: map[string]string{"anvil.dev/vendor": "dell"}, code: transitions.CodeInvalid},
		{name: "reserved subdomain", set: map[string]string{"x.anvil.dev/a": "b"}, code: transitions.CodeInvalid},
		{name: "reserved removal", remove: []string{"anvil.dev/vendor"}, code: transitions.CodeInvalid},
		{name: "invalid value", set: map[string]string{"team": "a b"}, code: transitions.CodeInvalid},
		{name: "invalid key", set: map[string]string{"-team": "a"}, code: transitions.CodeInvalid},
		{name: "set and removed", set: map[string]string{"team": "a"}, remove: []string{"team"}, code: transitions.CodeInvalid},
		{name: "nothing", code: transitions.CodeInvalid},
		{name: "remove all", remove: []string{"team", "example.com/tier"}, want: nil},
	} {
		spec, err := tr.SetLabels(t.Context(), machineID, step.set, step.remove)
		require.Equal(t, step.code, codeOf(err), "%s: %v", step.name, err)

		in, getErr := safe.StateGetByID[*resources.MachineIntent](t.Context(), st, machineID)
		require.NoError(t, getErr)

		if step.code != notRefused {
			continue
		}

		assert.Equal(t, step.want, in.TypedSpec().Labels, step.name)
		assert.Equal(t, step.want, spec.Labels, step.name)
		assert.Equal(t, resources.AcceptancePending, in.TypedSpec().Acceptance, "%s: labels leave acceptance alone", step.name)
	}

	_, err := tr.SetLabels(t.Context(), "nosuch", map[string]string{"a": "b"}, nil)
	assert.Equal(t, transitions.CodeNotFound, codeOf(err))

	many := map[string]string{}
	for i := range 65 {
		many["k"+string(rune('a'+i/26))+string(rune('a'+i%26))] = "v"
	}

	_, err = tr.SetLabels(t.Context(), machineID, many, nil)
	assert.Equal(t, transitions.CodeInvalid, codeOf(err))
}

func TestAcceptPending(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		from     []string
		accepted bool
		want     resources.Acceptance
	}{
		{from: nil, accepted: true, want: resources.AcceptanceAccepted},
		{from: []string{"cordon"}, accepted: true, want: resources.AcceptanceAccepted},
		{from: []string{"reject"}, want: resources.AcceptanceRejected},
		{from: []string{"accept"}, want: resources.AcceptanceAccepted},
		{from: []string{"accept", "deallocate"}, want: resources.AcceptanceAccepted},
	} {
		st := openState(t)
		// The machine has no TPM identity: auto-accept is told to accept such machines
		// (identity_test.go has the identity rules).
		tr := transitions.New(st, transitions.Options{AutoAcceptWithoutTPM: true})

		for _, name := range tc.from {
			_ = apply(t.Context(), tr, name) // deallocate is refused, which is fine here
		}

		before, err := safe.StateGetByID[*resources.MachineIntent](t.Context(), st, machineID)
		if err != nil {
			before = resources.NewMachineIntent(machineID)
		}

		accepted, err := tr.AcceptPending(t.Context(), machineID, "selector dc=nyc")
		require.NoError(t, err, "%v", tc.from)
		assert.Equal(t, tc.accepted, accepted, "%v", tc.from)

		after, err := safe.StateGetByID[*resources.MachineIntent](t.Context(), st, machineID)
		require.NoError(t, err)
		assert.Equal(t, tc.want, after.TypedSpec().Acceptance, "%v", tc.from)

		if tc.accepted {
			assert.NotEmpty(t, after.TypedSpec().WipeID, "%v: acceptance owes a wipe", tc.from)
		} else {
			assert.Equal(t, before.TypedSpec().WipeID, after.TypedSpec().WipeID, "%v: untouched", tc.from)
			assert.Equal(t, before.Metadata().Version().String(), after.Metadata().Version().String(), "%v: not rewritten", tc.from)
		}
	}

	_, err := transitions.New(openState(t), transitions.Options{AutoAcceptWithoutTPM: true}).AcceptPending(t.Context(), "nosuch", "all")
	assert.Equal(t, transitions.CodeNotFound, codeOf(err))
}
