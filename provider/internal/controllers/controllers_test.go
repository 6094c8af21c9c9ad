package controllers_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/controller/generic"
	"github.com/cosi-project/runtime/pkg/controller/runtime"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/image-factory/pkg/schematic"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/anvil-metal/anvil/provider/internal/controllers"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// run runs the controllers on a fresh state until the test ends.
// run runs the controllers (controller.Controller or controller.QController) on a
// state of their own.
func run(t *testing.T, ctrls ...any) *resources.Store {
	t.Helper()

	st, err := resources.Open(t.Context(), t.TempDir())
	require.NoError(t, err)

	rt, err := runtime.NewRuntime(st, zaptest.NewLogger(t))
	require.NoError(t, err)

	for _, c := range ctrls {
		switch c := c.(type) {
		case controller.QController:
			require.NoError(t, rt.RegisterQController(c))
		case controller.Controller:
			require.NoError(t, rt.RegisterController(c))
		default:
			t.Fatalf("%T is not a controller", c)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)

	go func() { done <- rt.Run(ctx) }()

	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
		require.NoError(t, st.Close())
	})

	return st
}

func eventually[T generic.ResourceWithRD](t *testing.T, st state.State, id string, check func(T) bool) T {
	t.Helper()

	var last T

	require.Eventually(t, func() bool {
		r, err := safe.StateGetByID[T](t.Context(), st, id)
		if err != nil {
			return false
		}

		last = r

		return check(r)
	}, 10*time.Second, 10*time.Millisecond)

	return last
}

func TestMachineController(t *testing.T) {
	t.Parallel()

	obs := make(chan controllers.PXEObservation)
	st := run(t, &controllers.MachineController{Observations: obs, Labels: map[string]string{"dc": "nyc"}})

	t0 := time.Now().Truncate(time.Second)
	first := controllers.PXEObservation{
		MachineID: "m1", UUID: "m1", MAC: "52:54:00:00:00:01", Arch: "amd64", Firmware: "bios",
		Address: "10.0.0.5", Decision: "agent", At: t0, AgentIssued: t0,
	}
	obs <- first

	m := eventually(t, st, "m1", func(m *resources.Machine) bool { return m.TypedSpec().Arch == "amd64" })
	assert.Equal(t, []string{"52:54:00:00:00:01"}, m.TypedSpec().MACs)
	assert.True(t, m.TypedSpec().FirstSeen.Equal(t0))
	assert.True(t, m.TypedSpec().AgentBootIssued.Equal(t0))

	label, _ := m.Metadata().Labels().Get("dc")
	assert.Equal(t, "nyc", label)

	version := m.Metadata().Version()

	// The same boot again a second later is not worth a write.
	again := first
	again.At = t0.Add(time.Second)
	obs <- again

	// Another NIC, a UEFI boot, a newer agent token: all recorded, first-seen kept.
	second := first
	second.MAC, second.Firmware, second.At, second.AgentIssued = "52:54:00:00:00:02", "uefi", t0.Add(2*time.Second), t0.Add(2*time.Second)
	obs <- second

	m = eventually(t, st, "m1", func(m *resources.Machine) bool { return m.TypedSpec().Firmware == "uefi" })
	assert.Equal(t, []string{"52:54:00:00:00:02", "52:54:00:00:00:01"}, m.TypedSpec().MACs)
	assert.True(t, m.TypedSpec().FirstSeen.Equal(t0))
	assert.True(t, m.TypedSpec().AgentBootIssued.Equal(second.AgentIssued))
	assert.Equal(t, version.Next().String(), m.Metadata().Version().String(), "the repeated boot was coalesced")
}

func TestMachineStatusController(t *testing.T) {
	t.Parallel()

	ctrl := controllers.NewMachineStatusController()
	st := run(t, ctrl)

	require.NoError(t, ctrl.RecordInstalled(t.Context(), "m1", "a1", "event-sink"))

	// RecordInstalled returns once the status is stored.
	s, err := safe.StateGetByID[*resources.MachineStatus](t.Context(), st, "m1")
	require.NoError(t, err)
	assert.Equal(t, "a1", s.TypedSpec().InstalledAllocation)
	assert.Equal(t, "event-sink", s.TypedSpec().InstalledBy)

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	assert.ErrorIs(t, ctrl.RecordInstalled(ctx, "m1", "a2", "manual"), context.Canceled)
}

type fakeFactory struct {
	mu      sync.Mutex
	fail    bool
	created []string
}

func (f *fakeFactory) SchematicCreate(_ context.Context, sc schematic.Schematic) (string, *schematic.Schematic, error) {
	f.mu.Lock()
	defer f.mu.Unlock()

	if f.fail {
		return "", nil, errors.New("factory unreachable")
	}

	id, err := sc.ID()
	if err != nil {
		return "", nil, err
	}

	f.created = append(f.created, id)

	return id, &sc, nil
}

func TestSchematicController(t *testing.T) {
	t.Parallel()

	schematicFor := func(exts, args []string) (schematic.Schematic, error) {
		var sc schematic.Schematic

		sc.Customization.SystemExtensions.OfficialExtensions = exts
		sc.Customization.ExtraKernelArgs = append(args, "talos.events.sink=10.0.0.1:50042")

		return sc, nil
	}

	factory := &fakeFactory{fail: true}
	st := run(t, &controllers.SchematicController{Factory: factory, SchematicFor: schematicFor})

	sc, err := schematicFor([]string{"siderolabs/intel-ucode"}, nil)
	require.NoError(t, err)

	id, err := sc.ID()
	require.NoError(t, err)

	in := resources.NewMachineIntent("m1")
	in.TypedSpec().Acceptance = resources.AcceptanceAccepted
	in.TypedSpec().Allocation = &resources.Allocation{ID: "a1", TalosVersion: "v1.9.0", SchematicID: id, Extensions: []string{"siderolabs/intel-ucode"}}
	require.NoError(t, st.Create(t.Context(), in))

	s := eventually(t, st, id, func(s *resources.Schematic) bool { return s.TypedSpec().LastError != "" })
	assert.False(t, s.TypedSpec().Registered)
	assert.Contains(t, s.TypedSpec().LastError, "factory unreachable")

	// The factory comes back: the retry registers it.
	factory.mu.Lock()
	factory.fail = false
	factory.mu.Unlock()

	// The retry comes after the controller's backoff: 5 s, 10 s after two failures.
	require.Eventually(t, func() bool {
		got, err := safe.StateGetByID[*resources.Schematic](t.Context(), st, id)
		if err == nil && got.TypedSpec().Registered {
			s = got

			return true
		}

		return false
	}, 30*time.Second, 10*time.Millisecond)
	assert.Empty(t, s.TypedSpec().LastError)
	assert.Equal(t, []string{"talos.events.sink=10.0.0.1:50042"}, s.TypedSpec().KernelArgs)

	// Deallocated: the schematic goes.
	_, err = safe.StateUpdateWithConflicts(t.Context(), st, in.Metadata(), func(in *resources.MachineIntent) error {
		in.TypedSpec().Allocation = nil

		return nil
	})
	require.NoError(t, err)

	require.Eventually(t, func() bool {
		_, err := safe.StateGetByID[*resources.Schematic](t.Context(), st, id)

		return state.IsNotFoundError(err)
	}, 10*time.Second, 10*time.Millisecond)

	// An allocation whose stored ID no longer matches its content is an error, not a
	// silent mismatch.
	in2 := resources.NewMachineIntent("m2")
	in2.TypedSpec().Acceptance = resources.AcceptanceAccepted
	in2.TypedSpec().Allocation = &resources.Allocation{ID: "a2", TalosVersion: "v1.9.0", SchematicID: "stale"}
	require.NoError(t, st.Create(t.Context(), in2))

	s = eventually(t, st, "stale", func(s *resources.Schematic) bool { return s.TypedSpec().LastError != "" })
	assert.Contains(t, s.TypedSpec().LastError, "content changed since the allocation")
}
