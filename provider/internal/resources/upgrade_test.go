package resources_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/provider/internal/lifecycle"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// TestUpgradeKeepsState opens a state directory written by the provider as it was
// before package renames (testdata/state-v1: the provider of commit 7459c17, driven
// through anvilctl and a real agent session, then a lease stored in full DHCP mode):
// every machine's phase, labels, erase report and secrets must survive, whatever the
// code is called now. Stored type names are a format: later changes keep this passing.
func TestUpgradeKeepsState(t *testing.T) {
	t.Parallel()

	// bbolt writes to the file it opens: work on a copy.
	dir := t.TempDir()

	for _, name := range []string{"state.db", "provider.key"} {
		b, err := os.ReadFile(filepath.Join("testdata", "state-v1", name))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), b, 0o600))
	}

	ctx := t.Context()

	st, err := resources.Open(ctx, dir)
	require.NoError(t, err)

	t.Cleanup(func() { require.NoError(t, st.Close()) })

	const (
		pending     = "00000000-0000-4000-8000-000000000001"
		rejected    = "00000000-0000-4000-8000-000000000002"
		wipeOwed    = "00000000-0000-4000-8000-000000000003"
		ready       = "00000000-0000-4000-8000-000000000004"
		allocated   = "00000000-0000-4000-8000-000000000005"
		installed   = "00000000-0000-4000-8000-000000000006"
		deallocated = "00000000-0000-4000-8000-000000000007"
	)

	policy := lifecycle.Policy{ProvisionBMC: true, IdlePower: resources.PowerOff}

	for id, want := range map[string]struct {
		phase lifecycle.Phase
		boot  lifecycle.Boot
	}{
		pending:     {lifecycle.PhasePending, lifecycle.BootAgent},
		rejected:    {lifecycle.PhaseRejected, lifecycle.BootDisk},
		wipeOwed:    {lifecycle.PhasePreparing, lifecycle.BootAgent},
		ready:       {lifecycle.PhaseReady, lifecycle.BootAgent},
		allocated:   {lifecycle.PhaseAllocated, lifecycle.BootTalos},
		installed:   {lifecycle.PhaseInstalled, lifecycle.BootDisk},
		deallocated: {lifecycle.PhaseReady, lifecycle.BootAgent},
	} {
		m, err := lifecycle.Read(ctx, st, id)
		require.NoError(t, err)
		require.NotNil(t, m.Machine, id)
		assert.Equal(t, id, m.Machine.UUID)
		assert.Equal(t, "amd64", m.Machine.Arch, id)
		assert.Equal(t, want.phase, m.Phase(policy), id)
		assert.Equal(t, want.boot, m.Boot(policy).Boot, id)

		// Every machine has its effective labels: the static ones for all.
		ml, err := safe.StateGetByID[*resources.MachineLabels](ctx, st, id)
		require.NoError(t, err, id)

		labels := ml.Metadata().Labels().Raw()
		assert.Equal(t, "fixture", labels["dc"], id)
		assert.Equal(t, "r1", labels["rack"], id)
	}

	// What people asked, as they asked it.
	r, err := lifecycle.Read(ctx, st, ready)
	require.NoError(t, err)
	assert.True(t, r.Intent.Cordoned)
	assert.Equal(t, resources.WipeModeZeroes, r.Intent.WipeMode)
	assert.Equal(t, resources.PowerOn, r.Intent.Power)

	p, err := safe.StateGetByID[*resources.MachineLabels](ctx, st, pending)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"team": "storage", "example.com/tier": "gold"}, p.TypedSpec().User)
	assert.Equal(t, "dell-inc", p.Metadata().Labels().Raw()["anvil.dev/vendor"], "derived from the inventory")

	a, err := lifecycle.Read(ctx, st, allocated)
	require.NoError(t, err)
	require.NotNil(t, a.Allocation())
	assert.Equal(t, "v1.9.0", a.Allocation().TalosVersion)
	assert.Equal(t, []string{"siderolabs/intel-ucode"}, a.Allocation().Extensions)
	assert.Equal(t, []string{"console=ttyS0"}, a.Allocation().KernelArgs)
	assert.Contains(t, a.Allocation().Config, "fixture-secret-token", "the machine config, decrypted")
	assert.NotEmpty(t, a.Allocation().SchematicID)

	// The erase report of the last wipe.
	require.NotNil(t, r.Status.LastWipe)
	assert.Equal(t, r.Intent.WipeID, r.Status.LastWipe.ID)
	require.Len(t, r.Status.LastWipe.Disks, 2)
	assert.Equal(t, resources.DiskWiped{Device: "vda", Method: "fast", Bytes: 1 << 30, DurationMs: 1200, Verified: "edges"}, r.Status.LastWipe.Disks[0])
	assert.Equal(t, "read-only", r.Status.LastWipe.Disks[1].Skipped)

	d, err := lifecycle.Read(ctx, st, deallocated)
	require.NoError(t, err)
	// Its agent was still up when it was deallocated, and wiped it again at once.
	assert.False(t, d.WipeOwed())
	assert.Equal(t, d.Intent.WipeID, d.Status.LastWipe.ID)
	assert.NotEqual(t, d.Status.InstalledAllocation, "", "the install it had is remembered")
	assert.Nil(t, d.Allocation())
	assert.NotEmpty(t, d.Intent.RebootID)

	// BMCs and their secrets: a user's, an agent's (the password derived from the key),
	// a Redfish one, an API one without a password.
	for id, want := range map[string]struct {
		kind, address, user, source, password string
	}{
		ready:     {"ipmi", "10.77.0.60", "admin", resources.BMCSourceUser, "s3cret-fixture"},
		allocated: {"redfish", "bmc-5.example", "root", resources.BMCSourceUser, "s3cret-fixture"},
		installed: {"ipmi", "10.77.0.50", "anvil", resources.BMCSourceAgent, st.Keys().BMCPassword(installed)},
		rejected:  {"api", "http://127.0.0.1:1/power", "", resources.BMCSourceUser, ""},
	} {
		cfg, err := safe.StateGetByID[*resources.BMCConfig](ctx, st, id)
		require.NoError(t, err, id)
		assert.Equal(t, want.kind, cfg.TypedSpec().Kind, id)
		assert.Equal(t, want.address, cfg.TypedSpec().Address, id)
		assert.Equal(t, want.user, cfg.TypedSpec().Username, id)
		assert.Equal(t, want.source, cfg.TypedSpec().Source, id)
		assert.Equal(t, want.password != "", cfg.TypedSpec().HasPassword, id)

		secret, err := safe.StateGetByID[*resources.BMCSecret](ctx, st, id)
		require.NoError(t, err, id)
		assert.Equal(t, want.password, secret.TypedSpec().Password, id)
	}

	// The lease of full DHCP mode.
	lease, err := safe.StateGetByID[*resources.DHCPLease](ctx, st, "52:54:00:00:10:09")
	require.NoError(t, err)
	assert.Equal(t, "10.77.0.109", lease.TypedSpec().Address)

	// The inventory an agent reported.
	inv, err := safe.StateGetByID[*resources.MachineInventory](ctx, st, installed)
	require.NoError(t, err)
	assert.Equal(t, "Dell Inc.", inv.TypedSpec().System.Manufacturer)
	assert.Equal(t, "SN-installed", inv.TypedSpec().System.Serial)
	assert.True(t, strings.HasPrefix(inv.TypedSpec().System.Product, "PowerEdge"))
}
