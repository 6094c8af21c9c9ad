package control_test

import (
	"context"
	"testing"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/image-factory/pkg/schematic"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	controlv1 "github.com/anvil-metal/anvil/api/control/v1"
	"github.com/anvil-metal/anvil/provider/internal/control"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

const machineID = "4c4c4544-0000-1000-8000-000000000001"

type recorded struct{ machine, allocation, source string }

type fakeRecorder struct{ calls []recorded }

func (f *fakeRecorder) RecordInstalled(_ context.Context, machine, allocation, source string) error {
	f.calls = append(f.calls, recorded{machine, allocation, source})

	return nil
}

func openState(t *testing.T) *resources.Store {
	t.Helper()

	st, err := resources.Open(t.Context(), t.TempDir())
	require.NoError(t, err)

	t.Cleanup(func() { require.NoError(t, st.Close()) })

	m := resources.NewMachine(machineID)
	m.TypedSpec().UUID = machineID
	require.NoError(t, st.Create(t.Context(), m))

	return st
}

// Start states, each set up through the transitions themselves.
var startStates = map[string][]string{
	"pending":           nil,
	"accepted":          {"accept"},
	"rejected":          {"reject"},
	"allocated":         {"accept", "allocate"},
	"cordoned":          {"accept", "cordon"},
	"allocated+cordon":  {"accept", "allocate", "cordon"},
	"rejected+accepted": {"reject", "accept"},
}

func apply(ctx context.Context, tr *control.Transitions, name string) error {
	id := machineID

	var err error

	switch name {
	case "accept":
		_, err = tr.Accept(ctx, &controlv1.AcceptRequest{MachineId: id})
	case "reject":
		_, err = tr.Reject(ctx, &controlv1.RejectRequest{MachineId: id})
	case "allocate":
		_, err = tr.Allocate(ctx, &controlv1.AllocateRequest{
			MachineId: id, TalosVersion: "v1.9.0",
			Extensions: []string{"siderolabs/iscsi-tools", "siderolabs/intel-ucode"},
			KernelArgs: []string{"console=ttyS0"},
			Config:     []byte("version: v1alpha1\nmachine:\n  token: secret\n"),
		})
	case "deallocate":
		_, err = tr.Deallocate(ctx, &controlv1.DeallocateRequest{MachineId: id})
	case "installed":
		_, err = tr.MarkInstalled(ctx, &controlv1.MarkInstalledRequest{MachineId: id})
	case "cordon":
		_, err = tr.Cordon(ctx, &controlv1.CordonRequest{MachineId: id})
	case "uncordon":
		_, err = tr.Uncordon(ctx, &controlv1.UncordonRequest{MachineId: id})
	case "power-off":
		_, err = tr.SetPower(ctx, &controlv1.SetPowerRequest{MachineId: id, Power: controlv1.PowerState_POWER_STATE_OFF})
	case "reboot":
		_, err = tr.Reboot(ctx, &controlv1.RebootRequest{MachineId: id})
	default:
		panic(name)
	}

	return err
}

func TestTransitions(t *testing.T) {
	t.Parallel()

	type want struct {
		code       codes.Code
		acceptance resources.Acceptance
		allocated  bool
		cordoned   bool
		newWipe    bool // a new wipe is owed
	}

	ok := func(a resources.Acceptance, allocated, cordoned bool) want {
		return want{code: codes.OK, acceptance: a, allocated: allocated, cordoned: cordoned}
	}
	refused := want{code: codes.FailedPrecondition}

	acc, rej, pen := resources.AcceptanceAccepted, resources.AcceptanceRejected, resources.AcceptancePending

	for _, tc := range []struct {
		from, transition string
		want             want
	}{
		{"pending", "accept", want{acceptance: acc, newWipe: true}},
		{"pending", "reject", ok(rej, false, false)},
		{"pending", "allocate", refused},
		{"pending", "deallocate", refused},
		{"pending", "installed", refused},
		{"pending", "cordon", ok(pen, false, true)},
		{"pending", "uncordon", ok(pen, false, false)},
		{"pending", "power-off", ok(pen, false, false)},
		{"pending", "reboot", refused},

		{"accepted", "accept", ok(acc, false, false)},
		{"accepted", "reject", ok(rej, false, false)},
		{"accepted", "allocate", ok(acc, true, false)},
		{"accepted", "deallocate", refused},
		{"accepted", "installed", refused},
		{"accepted", "cordon", ok(acc, false, true)},
		{"accepted", "power-off", ok(acc, false, false)},
		{"accepted", "reboot", ok(acc, false, false)},

		{"rejected", "accept", want{acceptance: acc, newWipe: true}},
		{"rejected", "reject", ok(rej, false, false)},
		{"rejected", "allocate", refused},
		{"rejected", "deallocate", refused},
		{"rejected", "installed", refused},
		{"rejected", "cordon", ok(rej, false, true)},
		{"rejected", "power-off", ok(rej, false, false)},
		{"rejected", "reboot", refused},

		{"rejected+accepted", "allocate", ok(acc, true, false)},

		{"allocated", "accept", ok(acc, true, false)},
		{"allocated", "reject", refused},
		{"allocated", "allocate", refused},
		{"allocated", "deallocate", want{acceptance: acc, newWipe: true}},
		{"allocated", "installed", ok(acc, true, false)},
		{"allocated", "cordon", ok(acc, true, true)},
		{"allocated", "power-off", ok(acc, true, false)},
		{"allocated", "reboot", ok(acc, true, false)},

		{"cordoned", "allocate", refused},
		{"cordoned", "uncordon", ok(acc, false, false)},
		{"cordoned", "reject", ok(rej, false, true)},

		{"allocated+cordon", "deallocate", want{acceptance: acc, cordoned: true, newWipe: true}},
		{"allocated+cordon", "uncordon", ok(acc, true, false)},
	} {
		t.Run(tc.from+"/"+tc.transition, func(t *testing.T) {
			t.Parallel()

			ctx := t.Context()
			st := openState(t)
			rec := &fakeRecorder{}
			tr := control.NewTransitions(st, rec, nil, nil)

			for _, step := range startStates[tc.from] {
				require.NoError(t, apply(ctx, tr, step), "setting up %s", step)
			}

			before := intentSpec(t, st)

			err := apply(ctx, tr, tc.transition)
			require.Equal(t, tc.want.code, status.Code(err), "error: %v", err)

			after := intentSpec(t, st)

			if tc.want.code != codes.OK {
				assert.Equal(t, before, after, "a refused transition changes nothing")
				assert.NotEmpty(t, status.Convert(err).Message())

				return
			}

			assert.Equal(t, tc.want.acceptance, after.Acceptance)
			assert.Equal(t, tc.want.allocated, after.Allocation != nil)
			assert.Equal(t, tc.want.cordoned, after.Cordoned)
			assert.Equal(t, tc.want.newWipe, after.WipeID != before.WipeID, "wipe owed")

			switch tc.transition {
			case "deallocate":
				assert.NotEqual(t, before.RebootID, after.RebootID, "a reboot back to the agent, to wipe")
			case "reboot":
				assert.NotEqual(t, before.RebootID, after.RebootID, "a new reboot request")
				assert.NotEmpty(t, after.RebootID)
			case "power-off":
				assert.Equal(t, resources.PowerOff, after.Power)
			case "installed":
				require.Len(t, rec.calls, 1)
				assert.Equal(t, recorded{machineID, after.Allocation.ID, control.InstalledByManual}, rec.calls[0])
			case "allocate":
				a := after.Allocation
				assert.Equal(t, "v1.9.0", a.TalosVersion)
				assert.Equal(t, []string{"siderolabs/intel-ucode", "siderolabs/iscsi-tools"}, a.Extensions)
				assert.Equal(t, []string{"console=ttyS0"}, a.KernelArgs)
				assert.Contains(t, a.Config, "token: secret")
				assert.NotEmpty(t, a.ID)

				sch := schematic.Schematic{Customization: schematic.Customization{
					SystemExtensions: schematic.SystemExtensions{OfficialExtensions: a.Extensions},
					ExtraKernelArgs:  a.KernelArgs,
				}}
				id, err := sch.ID()
				require.NoError(t, err)
				assert.Equal(t, id, a.SchematicID)
			}
		})
	}
}

func intentSpec(t *testing.T, st *resources.Store) resources.MachineIntentSpec {
	t.Helper()

	in, err := safe.StateGetByID[*resources.MachineIntent](t.Context(), st, machineID)
	if err != nil {
		return *resources.NewMachineIntent(machineID).TypedSpec()
	}

	return in.TypedSpec().DeepCopy()
}

func TestTransitionsUnknownMachine(t *testing.T) {
	t.Parallel()

	tr := control.NewTransitions(openState(t), &fakeRecorder{}, nil, nil)

	_, err := tr.Accept(t.Context(), &controlv1.AcceptRequest{MachineId: "nope"})
	require.Equal(t, codes.NotFound, status.Code(err))
	require.Equal(t, `machine "nope" is not known`, status.Convert(err).Message())

	_, err = tr.Accept(t.Context(), &controlv1.AcceptRequest{})
	require.Equal(t, codes.InvalidArgument, status.Code(err))
}

func TestAllocateValidation(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name string
		req  *controlv1.AllocateRequest
		msg  string
	}{
		{"no version", &controlv1.AllocateRequest{}, "talos version is required"},
		{"old version", &controlv1.AllocateRequest{TalosVersion: "v1.7.6"}, "v1.8.0 or later"},
		{"bad version", &controlv1.AllocateRequest{TalosVersion: "latest"}, "not a version"},
		{"bad extension", &controlv1.AllocateRequest{TalosVersion: "v1.9.0", Extensions: []string{"intel-ucode"}}, "official extension name"},
		{"arg with space", &controlv1.AllocateRequest{TalosVersion: "v1.9.0", KernelArgs: []string{"a=1 b=2"}}, "one argument per entry"},
		{"arg with newline", &controlv1.AllocateRequest{TalosVersion: "v1.9.0", KernelArgs: []string{"a=1\nchain x"}}, "control character"},
		{"config not yaml", &controlv1.AllocateRequest{TalosVersion: "v1.9.0", Config: []byte("secret: [unclosed")}, "not a YAML mapping"},
		{"config not talos", &controlv1.AllocateRequest{TalosVersion: "v1.9.0", Config: []byte("secret: x\n")}, "not a Talos config document"},
		{"config too big", &controlv1.AllocateRequest{TalosVersion: "v1.9.0", Config: make([]byte, control.MaxConfigSize+1)}, "at most"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			st := openState(t)
			tr := control.NewTransitions(st, nil, nil, nil)
			_, err := tr.Accept(t.Context(), &controlv1.AcceptRequest{MachineId: machineID})
			require.NoError(t, err)

			tc.req.MachineId = machineID
			_, err = tr.Allocate(t.Context(), tc.req)
			require.Equal(t, codes.InvalidArgument, status.Code(err), "error: %v", err)
			assert.Contains(t, status.Convert(err).Message(), tc.msg)
			assert.NotContains(t, status.Convert(err).Message(), "secret", "config never echoed")
		})
	}
}

func TestAllocateMultiDocConfigAndSchematicHook(t *testing.T) {
	t.Parallel()

	st := openState(t)
	hook := func(_ context.Context, id string, a resources.Allocation) (schematic.Schematic, error) {
		s, err := control.DefaultSchematic(t.Context(), id, a)
		s.Customization.ExtraKernelArgs = append(s.Customization.ExtraKernelArgs, "anvil.machine="+id)

		return s, err
	}
	tr := control.NewTransitions(st, nil, hook, nil)

	_, err := tr.Accept(t.Context(), &controlv1.AcceptRequest{MachineId: machineID})
	require.NoError(t, err)

	resp, err := tr.Allocate(t.Context(), &controlv1.AllocateRequest{
		MachineId: machineID, TalosVersion: "1.10.0-beta.1",
		Config: []byte("version: v1alpha1\n---\napiVersion: v1alpha1\nkind: HostnameConfig\nhostname: a\n"),
	})
	require.NoError(t, err)

	a := resp.GetIntent().GetAllocation()
	assert.Equal(t, "v1.10.0-beta.1", a.GetTalosVersion())
	assert.NotZero(t, a.GetConfigSize())

	want := schematic.Schematic{Customization: schematic.Customization{ExtraKernelArgs: []string{"anvil.machine=" + machineID}}}
	id, err := want.ID()
	require.NoError(t, err)
	assert.Equal(t, id, a.GetSchematicId())

	_, err = control.NewTransitions(st, nil, nil, nil).MarkInstalled(t.Context(), &controlv1.MarkInstalledRequest{MachineId: machineID})
	assert.Equal(t, codes.Unimplemented, status.Code(err))
}

// TestAcceptOwesWipe: acceptance owes a wipe unless the request says the machine holds
// nothing, and a wipe already owed is never cancelled by accepting again.
func TestAcceptOwesWipe(t *testing.T) {
	t.Parallel()

	ctx := t.Context()

	for _, tc := range []struct {
		name     string
		steps    []*controlv1.AcceptRequest
		reject   bool
		wantWipe bool
	}{
		{"accept", []*controlv1.AcceptRequest{{MachineId: machineID}}, false, true},
		{"accept --skip-wipe", []*controlv1.AcceptRequest{{MachineId: machineID, SkipInitialWipe: true}}, false, false},
		{"accept, then --skip-wipe", []*controlv1.AcceptRequest{{MachineId: machineID}, {MachineId: machineID, SkipInitialWipe: true}}, false, true},
		{"accept, reject, --skip-wipe", []*controlv1.AcceptRequest{{MachineId: machineID}, {MachineId: machineID, SkipInitialWipe: true}}, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			st := openState(t)
			tr := control.NewTransitions(st, &fakeRecorder{}, nil, nil)

			for i, req := range tc.steps {
				if i > 0 && tc.reject {
					_, err := tr.Reject(ctx, &controlv1.RejectRequest{MachineId: machineID})
					require.NoError(t, err)
				}

				_, err := tr.Accept(ctx, req)
				require.NoError(t, err)
			}

			in, err := safe.StateGetByID[*resources.MachineIntent](ctx, st, machineID)
			require.NoError(t, err)
			assert.Equal(t, tc.wantWipe, in.TypedSpec().WipeID != "")
		})
	}
}

func TestSetWipeMode(t *testing.T) {
	t.Parallel()

	ctx := t.Context()
	st := openState(t)
	tr := control.NewTransitions(st, &fakeRecorder{}, nil, nil)

	for _, tc := range []struct {
		mode string
		code codes.Code
	}{
		{"zeroes", codes.OK},
		{"secure-erase", codes.OK},
		{"", codes.OK},
		{"shred", codes.InvalidArgument},
	} {
		resp, err := tr.SetWipeMode(ctx, &controlv1.SetWipeModeRequest{MachineId: machineID, Mode: tc.mode})
		require.Equal(t, tc.code, status.Code(err), "%q: %v", tc.mode, err)

		if tc.code == codes.OK {
			assert.Equal(t, tc.mode, resp.GetIntent().GetWipeMode())
			assert.Equal(t, tc.mode, intentSpec(t, st).WipeMode)
		}
	}

	_, err := tr.SetWipeMode(ctx, &controlv1.SetWipeModeRequest{MachineId: "4c4c4544-0000-1000-8000-00000000dead", Mode: "fast"})
	assert.Equal(t, codes.NotFound, status.Code(err))
}
