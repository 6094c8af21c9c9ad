package transitions_test

import (
	"context"
	"strings"
	"testing"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/image-factory/pkg/schematic"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/provider/internal/power"
	"github.com/anvil-metal/anvil/provider/internal/resources"
	"github.com/anvil-metal/anvil/provider/internal/transitions"
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

// notRefused is the code of a transition that went through; failed is any error that
// is no refusal.
const (
	notRefused transitions.Code = 0
	failed     transitions.Code = -1
)

func codeOf(err error) transitions.Code {
	if err == nil {
		return notRefused
	}

	if c := transitions.CodeOf(err); c != transitions.CodeInternal {
		return c
	}

	return failed
}

func apply(ctx context.Context, tr *transitions.Service, name string) error {
	id := machineID

	var err error

	switch name {
	case "accept":
		_, err = tr.Accept(ctx, id, false)
	case "reject":
		_, err = tr.Reject(ctx, id)
	case "allocate":
		_, err = tr.Allocate(ctx, id, transitions.AllocationRequest{
			TalosVersion: "v1.9.0",
			Extensions:   []string{"siderolabs/iscsi-tools", "siderolabs/intel-ucode"},
			KernelArgs:   []string{"console=ttyS0"},
			Config:       []byte("version: v1alpha1\nmachine:\n  token: secret\n"),
		})
	case "deallocate":
		_, err = tr.Deallocate(ctx, id)
	case "installed":
		_, err = tr.MarkInstalled(ctx, id)
	case "cordon":
		_, err = tr.SetCordon(ctx, id, true)
	case "uncordon":
		_, err = tr.SetCordon(ctx, id, false)
	case "power-off":
		_, err = tr.SetPower(ctx, id, resources.PowerOff)
	case "reboot":
		_, _, err = tr.Reboot(ctx, id)
	default:
		panic(name)
	}

	return err
}

func TestTransitions(t *testing.T) {
	t.Parallel()

	type want struct {
		code       transitions.Code
		acceptance resources.Acceptance
		allocated  bool
		cordoned   bool
		newWipe    bool // a new wipe is owed
	}

	ok := func(a resources.Acceptance, allocated, cordoned bool) want {
		return want{code: notRefused, acceptance: a, allocated: allocated, cordoned: cordoned}
	}
	refused := want{code: transitions.CodeRefused}

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
			tr := transitions.New(st, transitions.Options{Recorder: rec})

			for _, step := range startStates[tc.from] {
				require.NoError(t, apply(ctx, tr, step), "setting up %s", step)
			}

			before := intentSpec(t, st)

			err := apply(ctx, tr, tc.transition)
			require.Equal(t, tc.want.code, codeOf(err), "error: %v", err)

			after := intentSpec(t, st)

			if tc.want.code != notRefused {
				assert.Equal(t, before, after, "a refused transition changes nothing")
				assert.NotEmpty(t, err.Error())

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
				assert.Equal(t, recorded{machineID, after.Allocation.ID, transitions.InstalledByManual}, rec.calls[0])
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

	tr := transitions.New(openState(t), transitions.Options{Recorder: &fakeRecorder{}})

	_, err := tr.Accept(t.Context(), "nope", false)
	require.Equal(t, transitions.CodeNotFound, codeOf(err))
	require.Equal(t, `machine "nope" is not known`, err.Error())

	_, err = tr.Accept(t.Context(), "", false)
	require.Equal(t, transitions.CodeInvalid, codeOf(err))
}

func TestAllocateValidation(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name string
		req  transitions.AllocationRequest
		msg  string
	}{
		{"no version", transitions.AllocationRequest{}, "talos version is required"},
		{"old version", transitions.AllocationRequest{TalosVersion: "v1.7.6"}, "v1.8.0 or later"},
		{"bad version", transitions.AllocationRequest{TalosVersion: "latest"}, "not a version"},
		{"bad extension", transitions.AllocationRequest{TalosVersion: "v1.9.0", Extensions: []string{"intel-ucode"}}, "official extension name"},
		{"arg with space", transitions.AllocationRequest{TalosVersion: "v1.9.0", KernelArgs: []string{"a=1 b=2"}}, "one argument per entry"},
		{"arg with newline", transitions.AllocationRequest{TalosVersion: "v1.9.0", KernelArgs: []string{"a=1\nchain x"}}, "control character"},
		{"config not yaml", transitions.AllocationRequest{TalosVersion: "v1.9.0", Config: []byte("secret: [unclosed")}, "not a YAML mapping"},
		{"config not talos", transitions.AllocationRequest{TalosVersion: "v1.9.0", Config: []byte("secret: x\n")}, "not a Talos config document"},
		{"config too big", transitions.AllocationRequest{TalosVersion: "v1.9.0", Config: make([]byte, transitions.MaxConfigSize+1)}, "at most"},
		{"owner with space", transitions.AllocationRequest{TalosVersion: "v1.9.0", Owner: "capi/default/m 0"}, "printable ASCII without spaces"},
		{"owner too long", transitions.AllocationRequest{TalosVersion: "v1.9.0", Owner: strings.Repeat("o", 513)}, "longer than 512"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			st := openState(t)
			tr := transitions.New(st, transitions.Options{})
			_, err := tr.Accept(t.Context(), machineID, false)
			require.NoError(t, err)

			_, err = tr.Allocate(t.Context(), machineID, tc.req)
			require.Equal(t, transitions.CodeInvalid, codeOf(err), "error: %v", err)
			assert.Contains(t, err.Error(), tc.msg)
			assert.NotContains(t, err.Error(), "secret", "config never echoed")
		})
	}
}

// TestClaims: an owner's allocation is idempotent for that owner (same ID, the newest
// config) and exclusive against everyone else; Release frees only the owner's claim and
// wipes once.
func TestClaims(t *testing.T) {
	t.Parallel()

	const (
		talos = "v1.9.0"
		other = "4c4c4544-0000-1000-8000-000000000002"
	)

	cfg := func(s string) []byte { return []byte("version: v1alpha1\nmachine:\n  type: " + s + "\n") }

	for _, tc := range []struct {
		name string
		run  func(t *testing.T, tr *transitions.Service)
	}{
		{"same owner again keeps the allocation and takes the new config", func(t *testing.T, tr *transitions.Service) {
			first, err := tr.Allocate(t.Context(), machineID, transitions.AllocationRequest{TalosVersion: talos, Owner: "capi/a", Config: cfg("worker")})
			require.NoError(t, err)

			again, err := tr.Allocate(t.Context(), machineID, transitions.AllocationRequest{TalosVersion: talos, Owner: "capi/a", Config: cfg("controlplane")})
			require.NoError(t, err)
			assert.Equal(t, first.Allocation.ID, again.Allocation.ID)
			assert.Equal(t, first.WipeID, again.WipeID, "no wipe owed by asking again")
			assert.Equal(t, string(cfg("controlplane")), again.Allocation.Config)
			assert.Equal(t, "capi/a", again.Allocation.Owner)
		}},
		{"another owner is refused", func(t *testing.T, tr *transitions.Service) {
			_, err := tr.Allocate(t.Context(), machineID, transitions.AllocationRequest{TalosVersion: talos, Owner: "capi/a"})
			require.NoError(t, err)

			_, err = tr.Allocate(t.Context(), machineID, transitions.AllocationRequest{TalosVersion: talos, Owner: "capi/b"})
			assert.Equal(t, transitions.CodeRefused, codeOf(err), "%v", err)

			_, err = tr.Allocate(t.Context(), machineID, transitions.AllocationRequest{TalosVersion: talos})
			assert.Equal(t, transitions.CodeRefused, codeOf(err), "a person's allocation neither: %v", err)
		}},
		{"same owner, other Talos version is refused", func(t *testing.T, tr *transitions.Service) {
			_, err := tr.Allocate(t.Context(), machineID, transitions.AllocationRequest{TalosVersion: talos, Owner: "capi/a"})
			require.NoError(t, err)

			_, err = tr.Allocate(t.Context(), machineID, transitions.AllocationRequest{TalosVersion: "v1.10.0", Owner: "capi/a"})
			assert.Equal(t, transitions.CodeRefused, codeOf(err), "%v", err)
			assert.Contains(t, err.Error(), "release it before")
		}},
		{"an owner holds one machine", func(t *testing.T, tr *transitions.Service) {
			_, err := tr.Accept(t.Context(), other, true)
			require.NoError(t, err)

			_, err = tr.Allocate(t.Context(), machineID, transitions.AllocationRequest{TalosVersion: talos, Owner: "capi/a"})
			require.NoError(t, err)

			_, err = tr.Allocate(t.Context(), other, transitions.AllocationRequest{TalosVersion: talos, Owner: "capi/a"})
			require.Equal(t, transitions.CodeRefused, codeOf(err), "%v", err)

			var refusal *transitions.Error
			require.ErrorAs(t, err, &refusal)
			assert.Equal(t, machineID, refusal.Holding, "the refusal names the machine the owner holds")

			_, err = tr.Allocate(t.Context(), other, transitions.AllocationRequest{TalosVersion: talos, Owner: "capi/b"})
			require.NoError(t, err, "another owner may")

			_, err = tr.Release(t.Context(), machineID, "capi/a")
			require.NoError(t, err)

			_, err = tr.Allocate(t.Context(), other, transitions.AllocationRequest{TalosVersion: talos, Owner: "capi/a"})
			assert.Equal(t, transitions.CodeRefused, codeOf(err), "taken by capi/b: %v", err)
		}},
		{"only the holder sets the BMC as a claimant", func(t *testing.T, tr *transitions.Service) {
			bmc := transitions.BMC{Backend: power.BackendIPMI, Address: "10.0.0.5", Username: "admin", Password: "pw", Owner: "capi/a"}

			_, err := tr.SetBMC(t.Context(), machineID, bmc)
			assert.Equal(t, transitions.CodeRefused, codeOf(err), "not allocated: %v", err)

			_, err = tr.Allocate(t.Context(), machineID, transitions.AllocationRequest{TalosVersion: talos, Owner: "capi/b"})
			require.NoError(t, err)

			_, err = tr.SetBMC(t.Context(), machineID, bmc)
			assert.Equal(t, transitions.CodeRefused, codeOf(err), "held by another: %v", err)

			_, err = tr.Release(t.Context(), machineID, "capi/b")
			require.NoError(t, err)

			_, err = tr.Allocate(t.Context(), machineID, transitions.AllocationRequest{TalosVersion: talos, Owner: "capi/a"})
			require.NoError(t, err)

			_, err = tr.SetBMC(t.Context(), machineID, bmc)
			assert.NoError(t, err, "its holder may")
		}},
		{"a person's allocation is not an owner's", func(t *testing.T, tr *transitions.Service) {
			_, err := tr.Allocate(t.Context(), machineID, transitions.AllocationRequest{TalosVersion: talos})
			require.NoError(t, err)

			_, err = tr.Release(t.Context(), machineID, "capi/a")
			assert.Equal(t, transitions.CodeRefused, codeOf(err), "%v", err)
			assert.Contains(t, err.Error(), "allocated to a person")
		}},
		{"release frees the owner's claim once", func(t *testing.T, tr *transitions.Service) {
			_, err := tr.Allocate(t.Context(), machineID, transitions.AllocationRequest{TalosVersion: talos, Owner: "capi/a"})
			require.NoError(t, err)

			_, err = tr.Release(t.Context(), machineID, "capi/b")
			assert.Equal(t, transitions.CodeRefused, codeOf(err), "%v", err)

			released, err := tr.Release(t.Context(), machineID, "capi/a")
			require.NoError(t, err)
			assert.Nil(t, released.Allocation)
			assert.NotEmpty(t, released.WipeID)

			again, err := tr.Release(t.Context(), machineID, "capi/a")
			require.NoError(t, err)
			assert.Equal(t, released.WipeID, again.WipeID, "the second release owes no second wipe")

			_, err = tr.Release(t.Context(), machineID, "")
			assert.Equal(t, transitions.CodeInvalid, codeOf(err), "%v", err)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			st := openState(t)
			require.NoError(t, st.Create(t.Context(), resources.NewMachine(other)))

			tr := transitions.New(st, transitions.Options{})
			_, err := tr.Accept(t.Context(), machineID, true)
			require.NoError(t, err)

			tc.run(t, tr)
		})
	}
}

func TestAllocateMultiDocConfigAndSchematicHook(t *testing.T) {
	t.Parallel()

	st := openState(t)
	hook := func(_ context.Context, id string, a resources.Allocation) (schematic.Schematic, error) {
		s, err := transitions.DefaultSchematic(t.Context(), id, a)
		s.Customization.ExtraKernelArgs = append(s.Customization.ExtraKernelArgs, "anvil.machine="+id)

		return s, err
	}
	tr := transitions.New(st, transitions.Options{SchematicFor: hook})

	_, err := tr.Accept(t.Context(), machineID, false)
	require.NoError(t, err)

	spec, err := tr.Allocate(t.Context(), machineID, transitions.AllocationRequest{
		TalosVersion: "1.10.0-beta.1",
		Config:       []byte("version: v1alpha1\n---\napiVersion: v1alpha1\nkind: HostnameConfig\nhostname: a\n"),
	})
	require.NoError(t, err)

	a := spec.Allocation
	assert.Equal(t, "v1.10.0-beta.1", a.TalosVersion)
	assert.NotEmpty(t, a.Config)

	want := schematic.Schematic{Customization: schematic.Customization{ExtraKernelArgs: []string{"anvil.machine=" + machineID}}}
	id, err := want.ID()
	require.NoError(t, err)
	assert.Equal(t, id, a.SchematicID)

	_, err = transitions.New(st, transitions.Options{}).MarkInstalled(t.Context(), machineID)
	assert.Equal(t, transitions.CodeUnavailable, codeOf(err))
}

// TestAcceptOwesWipe: acceptance owes a wipe unless the request says the machine holds
// nothing, and a wipe already owed is never cancelled by accepting again.
func TestAcceptOwesWipe(t *testing.T) {
	t.Parallel()

	ctx := t.Context()

	for _, tc := range []struct {
		name     string
		steps    []bool // skip the initial wipe
		reject   bool
		wantWipe bool
	}{
		{"accept", []bool{false}, false, true},
		{"accept --skip-wipe", []bool{true}, false, false},
		{"accept, then --skip-wipe", []bool{false, true}, false, true},
		{"accept, reject, --skip-wipe", []bool{false, true}, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			st := openState(t)
			tr := transitions.New(st, transitions.Options{Recorder: &fakeRecorder{}})

			for i, skip := range tc.steps {
				if i > 0 && tc.reject {
					_, err := tr.Reject(ctx, machineID)
					require.NoError(t, err)
				}

				_, err := tr.Accept(ctx, machineID, skip)
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
	tr := transitions.New(st, transitions.Options{Recorder: &fakeRecorder{}})

	for _, tc := range []struct {
		mode string
		code transitions.Code
	}{
		{"zeroes", notRefused},
		{"secure-erase", notRefused},
		{"", notRefused},
		{"shred", transitions.CodeInvalid},
	} {
		spec, err := tr.SetWipeMode(ctx, machineID, tc.mode)
		require.Equal(t, tc.code, codeOf(err), "%q: %v", tc.mode, err)

		if tc.code == notRefused {
			assert.Equal(t, tc.mode, spec.WipeMode)
			assert.Equal(t, tc.mode, intentSpec(t, st).WipeMode)
		}
	}

	_, err := tr.SetWipeMode(ctx, "4c4c4544-0000-1000-8000-00000000dead", "fast")
	assert.Equal(t, transitions.CodeNotFound, codeOf(err))
}

func TestSetKexecMode(t *testing.T) {
	t.Parallel()

	ctx := t.Context()
	st := openState(t)
	tr := transitions.New(st, transitions.Options{Recorder: &fakeRecorder{}, ManagedBy: "Omni at https://omni.example"})

	for _, tc := range []struct {
		mode string
		code transitions.Code
	}{
		{"never", notRefused},
		{"always", notRefused},
		{"", notRefused},
		{"sometimes", transitions.CodeInvalid},
	} {
		spec, err := tr.SetKexecMode(ctx, machineID, tc.mode)
		require.Equal(t, tc.code, codeOf(err), "%q: %v (Anvil's own setting, local beside Omni)", tc.mode, err)

		if tc.code == notRefused {
			assert.Equal(t, tc.mode, spec.Kexec)
			assert.Equal(t, tc.mode, intentSpec(t, st).Kexec)
		}
	}

	_, err := tr.SetKexecMode(ctx, "4c4c4544-0000-1000-8000-00000000dead", "never")
	assert.Equal(t, transitions.CodeNotFound, codeOf(err))
}

// TestManagedBy: with another owner (Omni), what it owns is refused locally, saying who
// owns it, while labels, wipe mode and BMC details stay local; the owner's own view
// applies everything.
func TestManagedBy(t *testing.T) {
	t.Parallel()

	ctx := t.Context()
	st := openState(t)
	local := transitions.New(st, transitions.Options{Recorder: &fakeRecorder{}, ManagedBy: "Omni at https://omni.example"})

	for _, name := range []string{"accept", "reject", "allocate", "deallocate", "installed", "cordon", "uncordon", "power-off", "reboot"} {
		err := apply(ctx, local, name)
		require.Equal(t, transitions.CodeManaged, codeOf(err), "%s: %v", name, err)
		assert.Contains(t, err.Error(), "managed by Omni at https://omni.example", name)
	}

	_, err := local.AcceptPending(ctx, machineID, "all")
	assert.Equal(t, transitions.CodeManaged, codeOf(err))
	assert.Equal(t, resources.AcceptancePending, intentSpec(t, st).Acceptance, "nothing changed")

	_, err = local.SetLabels(ctx, machineID, map[string]string{"team": "a"}, nil)
	require.NoError(t, err)
	_, err = local.SetWipeMode(ctx, machineID, resources.WipeModeZeroes)
	require.NoError(t, err)
	_, err = local.SetBMC(ctx, machineID, transitions.BMC{Backend: power.BackendIPMI, Address: "10.0.0.5", Username: "admin", Password: "pw"})
	require.NoError(t, err)

	owner := local.Owner()
	for _, name := range []string{"accept", "allocate", "installed", "reboot", "deallocate"} {
		require.NoError(t, apply(ctx, owner, name), name)
	}
}
