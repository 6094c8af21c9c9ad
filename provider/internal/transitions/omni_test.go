package transitions_test

import (
	"testing"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/provider/internal/resources"
	"github.com/anvil-metal/anvil/provider/internal/transitions"
)

// TestApplyOmni is the mapping of Omni's infra.Machine onto the machine's intent, row by
// row: acceptance × allocation × wipe id × reboot and power-off requests × cordon, each
// applied to a machine in a start state of its own, then applied again to prove that
// the same decisions change nothing (a resync, a restart).
func TestApplyOmni(t *testing.T) {
	t.Parallel()

	acc, rej, pen := resources.AcceptanceAccepted, resources.AcceptanceRejected, resources.AcceptancePending
	on, off, def := resources.PowerOn, resources.PowerOff, resources.PowerDefault

	alloc := func(o resources.OmniMachineSpec) resources.OmniMachineSpec {
		o.ClusterTalosVersion, o.Extensions, o.ExtraKernelArgs = "v1.9.0", []string{"siderolabs/intel-ucode"}, "console=ttyS0 talos.dashboard.disabled=1"

		return o
	}

	type want struct {
		acceptance resources.Acceptance
		talos      string               // the allocation's Talos version, "" for none
		power      resources.PowerState // the override
		idle       resources.PowerState
		wipeID     string
		rebootID   string
		cordoned   bool
	}

	for _, tc := range []struct {
		name string
		from []resources.OmniMachineSpec // applied first, in order
		omni resources.OmniMachineSpec
		want want
	}{
		{
			name: "pending",
			omni: resources.OmniMachineSpec{Acceptance: pen, PreferredPower: on},
			want: want{acceptance: pen, power: def},
		},
		{
			name: "rejected: never powered",
			omni: resources.OmniMachineSpec{Acceptance: rej, PreferredPower: on},
			want: want{acceptance: rej, power: def},
		},
		{
			name: "accepted: the initial wipe is owed",
			omni: resources.OmniMachineSpec{Acceptance: acc, PreferredPower: off},
			want: want{acceptance: acc, power: def, idle: off, wipeID: "omni:initial"},
		},
		{
			name: "accepted, preferred on",
			omni: resources.OmniMachineSpec{Acceptance: acc, PreferredPower: on},
			want: want{acceptance: acc, power: def, idle: on, wipeID: "omni:initial"},
		},
		{
			name: "allocated",
			omni: alloc(resources.OmniMachineSpec{Acceptance: acc, PreferredPower: on}),
			want: want{acceptance: acc, talos: "v1.9.0", power: def, idle: on, wipeID: "omni:initial"},
		},
		{
			name: "allocated, a power-off request wins over the allocation",
			omni: alloc(resources.OmniMachineSpec{Acceptance: acc, PreferredPower: on, PowerOffRequestID: "p1"}),
			want: want{acceptance: acc, talos: "v1.9.0", power: off, idle: on, wipeID: "omni:initial"},
		},
		{
			name: "a reboot request",
			omni: alloc(resources.OmniMachineSpec{Acceptance: acc, PreferredPower: on, RequestedRebootID: "r1"}),
			want: want{acceptance: acc, talos: "v1.9.0", power: def, idle: on, wipeID: "omni:initial", rebootID: "omni:reboot=r1"},
		},
		{
			name: "deallocated: Omni's new wipe id owes a wipe and reboots into the agent",
			from: []resources.OmniMachineSpec{alloc(resources.OmniMachineSpec{Acceptance: acc, PreferredPower: on})},
			omni: resources.OmniMachineSpec{Acceptance: acc, PreferredPower: off, WipeID: "w1"},
			want: want{acceptance: acc, power: def, idle: off, wipeID: "omni:w1", rebootID: "omni:wipe=w1"},
		},
		{
			name: "a reboot request and a wipe",
			omni: resources.OmniMachineSpec{Acceptance: acc, WipeID: "w2", RequestedRebootID: "r2"},
			want: want{acceptance: acc, power: def, wipeID: "omni:w2", rebootID: "omni:reboot=r2,wipe=w2"},
		},
		{
			name: "cordoned",
			omni: resources.OmniMachineSpec{Acceptance: acc, Cordoned: true},
			want: want{acceptance: acc, power: def, wipeID: "omni:initial", cordoned: true},
		},
		{
			name: "rejected after being allocated: the allocation goes",
			from: []resources.OmniMachineSpec{alloc(resources.OmniMachineSpec{Acceptance: acc, PreferredPower: on})},
			omni: resources.OmniMachineSpec{Acceptance: rej},
			want: want{acceptance: rej, power: def, wipeID: "omni:initial"},
		},
		{
			name: "a Talos upgrade: a new allocation",
			from: []resources.OmniMachineSpec{alloc(resources.OmniMachineSpec{Acceptance: acc, PreferredPower: on})},
			omni: func() resources.OmniMachineSpec {
				o := alloc(resources.OmniMachineSpec{Acceptance: acc, PreferredPower: on})
				o.ClusterTalosVersion = "v1.9.1"

				return o
			}(),
			want: want{acceptance: acc, talos: "v1.9.1", power: def, idle: on, wipeID: "omni:initial"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			st := openState(t)
			tr := transitions.New(st, transitions.Options{ManagedBy: "Omni at https://omni.test"}).Owner()

			var before *resources.MachineIntentSpec

			for _, o := range tc.from {
				var err error

				before, err = tr.ApplyOmni(t.Context(), machineID, o)
				require.NoError(t, err)
			}

			got, err := tr.ApplyOmni(t.Context(), machineID, tc.omni)
			require.NoError(t, err)

			talos := ""
			if got.Allocation != nil {
				talos = got.Allocation.TalosVersion
				assert.Equal(t, []string{"console=ttyS0", "talos.dashboard.disabled=1"}, got.Allocation.KernelArgs)
				assert.NotEmpty(t, got.Allocation.SchematicID)
			}

			assert.Equal(t, tc.want, want{
				acceptance: got.Acceptance, talos: talos, power: got.Power, idle: got.IdlePower, wipeID: got.WipeID, rebootID: got.RebootID, cordoned: got.Cordoned,
			})

			if before != nil && before.Allocation != nil && got.Allocation != nil && tc.want.talos == before.Allocation.TalosVersion {
				assert.Equal(t, before.Allocation.ID, got.Allocation.ID, "the same allocation keeps its ID")
			}

			// The same decisions again change nothing: not the allocation's ID, not the
			// resource's version.
			intent, err := safe.StateGetByID[*resources.MachineIntent](t.Context(), st, machineID)
			require.NoError(t, err)

			again, err := tr.ApplyOmni(t.Context(), machineID, tc.omni)
			require.NoError(t, err)
			assert.Equal(t, *got, *again)

			after, err := safe.StateGetByID[*resources.MachineIntent](t.Context(), st, machineID)
			require.NoError(t, err)
			assert.Equal(t, intent.Metadata().Version(), after.Metadata().Version(), "applied again, the intent is not rewritten")
		})
	}
}

// TestApplyOmniKeepsLocal: what Omni does not decide — the user's labels, the wipe
// mode — stays as the local control set it.
func TestApplyOmniKeepsLocal(t *testing.T) {
	t.Parallel()

	st := openState(t)
	local := transitions.New(st, transitions.Options{ManagedBy: "Omni at https://omni.test"})
	tr := local.Owner()

	_, err := local.SetLabels(t.Context(), machineID, map[string]string{"team": "storage"}, nil)
	require.NoError(t, err)

	_, err = local.SetWipeMode(t.Context(), machineID, resources.WipeModeZeroes)
	require.NoError(t, err)

	_, err = local.SetKexecMode(t.Context(), machineID, resources.KexecNever)
	require.NoError(t, err)

	got, err := tr.ApplyOmni(t.Context(), machineID, resources.OmniMachineSpec{Acceptance: resources.AcceptanceAccepted})
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"team": "storage"}, got.Labels)
	assert.Equal(t, resources.WipeModeZeroes, got.WipeMode)
	assert.Equal(t, resources.KexecNever, got.Kexec)
}

// TestApplyOmniRefused: the local view refuses Omni's transition, which only the owner
// applies; malformed input from the adapter is invalid, and nothing is written.
func TestApplyOmniRefused(t *testing.T) {
	t.Parallel()

	st := openState(t)
	local := transitions.New(st, transitions.Options{ManagedBy: "Omni at https://omni.test"})

	_, err := local.ApplyOmni(t.Context(), machineID, resources.OmniMachineSpec{Acceptance: resources.AcceptanceAccepted})
	assert.Equal(t, transitions.CodeManaged, transitions.CodeOf(err))

	_, err = local.Accept(t.Context(), machineID, false)
	require.Error(t, err)
	assert.Equal(t, transitions.CodeManaged, transitions.CodeOf(err))
	assert.Contains(t, err.Error(), "this provider is managed by Omni at https://omni.test")

	for name, o := range map[string]resources.OmniMachineSpec{
		"acceptance":   {Acceptance: "maybe"},
		"power":        {Acceptance: resources.AcceptanceAccepted, PreferredPower: "half"},
		"wipe id":      {Acceptance: resources.AcceptanceAccepted, WipeID: "a,b"},
		"talos":        {Acceptance: resources.AcceptanceAccepted, ClusterTalosVersion: "latest"},
		"kernel args":  {Acceptance: resources.AcceptanceAccepted, ClusterTalosVersion: "v1.9.0", ExtraKernelArgs: "a\x00b"},
		"reboot id":    {Acceptance: resources.AcceptanceAccepted, RequestedRebootID: "r\n1"},
		"power-off id": {Acceptance: resources.AcceptanceAccepted, PowerOffRequestID: string(make([]byte, 200))},
	} {
		_, err := local.Owner().ApplyOmni(t.Context(), machineID, o)
		assert.Equal(t, transitions.CodeInvalid, transitions.CodeOf(err), "%s: %v", name, err)
	}

	_, err = safe.StateGetByID[*resources.MachineIntent](t.Context(), st, machineID)
	assert.Error(t, err, "nothing written")

	_, err = local.Owner().ApplyOmni(t.Context(), "4c4c4544-0000-1000-8000-0000000000ff", resources.OmniMachineSpec{Acceptance: resources.AcceptanceAccepted})
	assert.Equal(t, transitions.CodeNotFound, transitions.CodeOf(err), "a machine the provider never saw")
}

// TestAdoption: a machine a standalone provider handed out keeps its allocation when
// the provider turns to Omni — Omni's decisions are refused for it, saying how to hand
// it over — until it is deallocated locally, the one local transition Omni mode allows
// it; then Omni decides, and an Omni allocation is Omni's to end.
func TestAdoption(t *testing.T) {
	t.Parallel()

	ctx := t.Context()
	st := openState(t)

	standalone := transitions.New(st, transitions.Options{Recorder: &fakeRecorder{}})
	require.NoError(t, apply(ctx, standalone, "accept"))
	require.NoError(t, apply(ctx, standalone, "allocate"))

	before := intentSpec(t, st)

	local := transitions.New(st, transitions.Options{ManagedBy: "Omni at https://omni.test"})
	owner := local.Owner()

	for _, o := range []resources.OmniMachineSpec{
		{Acceptance: resources.AcceptancePending},
		{Acceptance: resources.AcceptanceAccepted, WipeID: "w1"},
		{Acceptance: resources.AcceptanceRejected},
	} {
		_, err := owner.ApplyOmni(ctx, machineID, o)
		require.Equal(t, transitions.CodeRefused, codeOf(err), "%+v: %v", o, err)
		assert.Contains(t, err.Error(), "deallocate it locally")
	}

	assert.Equal(t, before, intentSpec(t, st), "a local allocation is never overridden")

	after, err := local.Deallocate(ctx, machineID)
	require.NoError(t, err, "a local allocation may be released in Omni mode")
	assert.Nil(t, after.Allocation)
	assert.NotEqual(t, before.WipeID, after.WipeID, "a wipe is owed")

	got, err := owner.ApplyOmni(ctx, machineID, resources.OmniMachineSpec{Acceptance: resources.AcceptanceAccepted, ClusterTalosVersion: "v1.9.0"})
	require.NoError(t, err, "Omni decides now")
	require.NotNil(t, got.Allocation)

	_, err = local.Deallocate(ctx, machineID)
	assert.Equal(t, transitions.CodeManaged, codeOf(err), "Omni's allocation is Omni's to end")
}

// TestWayBack: a provider turned standalone again takes the intents as Omni left them,
// and the local control decides from there: an Omni allocation is kept (its machine
// still boots its Talos) until it is deallocated locally, which owes a wipe as any
// deallocation does; acceptance is the local control's again.
func TestWayBack(t *testing.T) {
	t.Parallel()

	ctx := t.Context()
	st := openState(t)

	omni := transitions.New(st, transitions.Options{ManagedBy: "Omni at https://omni.test"}).Owner()

	left, err := omni.ApplyOmni(ctx, machineID, resources.OmniMachineSpec{Acceptance: resources.AcceptanceAccepted, ClusterTalosVersion: "v1.9.0", WipeID: "w1"})
	require.NoError(t, err)
	require.NotNil(t, left.Allocation)

	standalone := transitions.New(st, transitions.Options{Recorder: &fakeRecorder{}})

	assert.Equal(t, *left, intentSpec(t, st), "restarting standalone changes nothing by itself")

	after, err := standalone.Deallocate(ctx, machineID)
	require.NoError(t, err, "Omni's allocation is the local control's to end now")
	assert.Nil(t, after.Allocation)
	assert.NotEqual(t, left.WipeID, after.WipeID, "a wipe is owed")

	rejected, err := standalone.Reject(ctx, machineID)
	require.NoError(t, err, "acceptance is local again")
	assert.Equal(t, resources.AcceptanceRejected, rejected.Acceptance)
}
