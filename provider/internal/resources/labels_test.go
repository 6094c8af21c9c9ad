package resources_test

import (
	"strings"
	"testing"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/provider/internal/resources"
)

func TestLabelRules(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		in, want string
	}{
		{"Dell Inc.", "Dell-Inc"},
		{"  Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz ", "Intel-R-Xeon-R-Gold-6338-CPU-2.00GHz"},
		{"QEMU", "QEMU"},
		{"...", ""},
		{"Standard PC (Q35 + ICH9, 2009)", "Standard-PC-Q35-ICH9-2009"},
		{"\x00\x00x", "x"},
		// Cut to 63, then trimmed back to a letter or digit.
		{strings.Repeat("a", 62) + "-bc", strings.Repeat("a", 62)},
	} {
		got := resources.SanitizeLabelValue(tc.in)
		assert.Equal(t, tc.want, got, "%q", tc.in)
		assert.NoError(t, resources.ValidateLabelValue(got), "%q", got)
	}

	for _, tc := range []struct {
		key, value string
		ok         bool
	}{
		{"dc", "nyc", true},
		{"example.com/team", "storage", true},
		{"team", "", true},
		{"anvil.dev/vendor", "dell", false},
		{"lab.anvil.dev/x", "y", false},
		{"notanvil.dev/x", "y", true},
		{"dc", "new york", false},
		{"dc", "-x", false},
		{"", "x", false},
		{"/x", "y", false},
		{"x/", "y", false},
		{"a/b/c", "y", false},
	} {
		err := resources.ValidateUserLabel(tc.key, tc.value)
		assert.Equal(t, tc.ok, err == nil, "%q=%q: %v", tc.key, tc.value, err)
	}
}

// The label maps survive the store's protobuf encoding and a reopen.
func TestLabelsPersist(t *testing.T) {
	t.Parallel()

	dir := t.TempDir()
	ctx := t.Context()

	st, err := resources.Open(ctx, dir)
	require.NoError(t, err)

	in := resources.NewMachineIntent("m1")
	in.TypedSpec().Labels = map[string]string{"team": "storage", "empty": ""}
	require.NoError(t, st.Create(ctx, in))

	ml := resources.NewMachineLabels("m1")
	ml.TypedSpec().Static = map[string]string{"dc": "nyc"}
	ml.TypedSpec().Derived = map[string]string{"anvil.dev/arch": "amd64"}
	ml.TypedSpec().User = map[string]string{"dc": "sfo"}
	ml.TypedSpec().FromInventory = true
	require.NoError(t, st.Create(ctx, ml))
	require.NoError(t, st.Close())

	st, err = resources.Open(ctx, dir)
	require.NoError(t, err)

	t.Cleanup(func() { require.NoError(t, st.Close()) })

	gotIntent, err := safe.StateGetByID[*resources.MachineIntent](ctx, st, "m1")
	require.NoError(t, err)
	assert.Equal(t, in.TypedSpec().Labels, gotIntent.TypedSpec().Labels)

	gotLabels, err := safe.StateGetByID[*resources.MachineLabels](ctx, st, "m1")
	require.NoError(t, err)
	assert.Equal(t, ml.TypedSpec(), gotLabels.TypedSpec())
	assert.Equal(t, map[string]string{"dc": "sfo", "anvil.dev/arch": "amd64"}, gotLabels.TypedSpec().Effective(), "a user label overrides a static one")
}
