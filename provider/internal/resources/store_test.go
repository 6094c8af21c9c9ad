package resources_test

import (
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/provider/internal/resources"
)

func TestStorePersistsAcrossReopen(t *testing.T) {
	t.Parallel()

	dir := t.TempDir()
	ctx := t.Context()
	now := time.Now().UTC().Truncate(time.Second)

	st, err := resources.Open(ctx, dir)
	require.NoError(t, err)

	m := resources.NewMachine("4c4c4544-0000-1000-8000-000000000001")
	m.TypedSpec().UUID = m.Metadata().ID()
	m.TypedSpec().MACs = []string{"52:54:00:00:00:01"}
	m.TypedSpec().Arch = "amd64"
	m.TypedSpec().FirstSeen = now
	require.NoError(t, st.Create(ctx, m))

	in := resources.NewMachineIntent(m.Metadata().ID())
	in.TypedSpec().Acceptance = resources.AcceptanceAccepted
	in.TypedSpec().Allocation = &resources.Allocation{ID: "a1", TalosVersion: "v1.9.0", Extensions: []string{"siderolabs/intel-ucode"}, AllocatedAt: now}
	require.NoError(t, st.Create(ctx, in))
	require.NoError(t, st.Close())

	st, err = resources.Open(ctx, dir)
	require.NoError(t, err)

	t.Cleanup(func() { require.NoError(t, st.Close()) })

	got, err := safe.StateGetByID[*resources.Machine](ctx, st, m.Metadata().ID())
	require.NoError(t, err)
	require.Equal(t, m.TypedSpec(), got.TypedSpec())

	gotIntent, err := safe.StateGetByID[*resources.MachineIntent](ctx, st, m.Metadata().ID())
	require.NoError(t, err)
	require.Equal(t, in.TypedSpec(), gotIntent.TypedSpec())
}

func TestStoreRefusesSecondOpener(t *testing.T) {
	t.Parallel()

	dir := t.TempDir()

	st, err := resources.Open(t.Context(), dir)
	require.NoError(t, err)

	t.Cleanup(func() { require.NoError(t, st.Close()) })

	_, err = resources.Open(t.Context(), dir)
	require.ErrorContains(t, err, "locked by another process")
}

func TestKeysAreStable(t *testing.T) {
	t.Parallel()

	dir := t.TempDir()

	a, err := resources.LoadKeys(dir)
	require.NoError(t, err)

	b, err := resources.LoadKeys(dir)
	require.NoError(t, err)
	require.Equal(t, a.TokenKey(), b.TokenKey())
}

// A machine's BMC password is the same across restarts, different per machine and per
// provider, and fits the BMCs' 16-character limit.
func TestBMCPassword(t *testing.T) {
	t.Parallel()

	dir := t.TempDir()

	a, err := resources.LoadKeys(dir)
	require.NoError(t, err)

	b, err := resources.LoadKeys(dir)
	require.NoError(t, err)

	other, err := resources.LoadKeys(t.TempDir())
	require.NoError(t, err)

	const m1, m2 = "4c4c4544-0000-1000-8000-000000000001", "4c4c4544-0000-1000-8000-000000000002"

	pw := a.BMCPassword(m1)
	require.Regexp(t, `^[A-Za-z0-9]{16}$`, pw)
	require.Equal(t, pw, b.BMCPassword(m1), "stable across restarts")
	require.NotEqual(t, pw, a.BMCPassword(m2), "per machine")
	require.NotEqual(t, pw, other.BMCPassword(m1), "per provider")
}
