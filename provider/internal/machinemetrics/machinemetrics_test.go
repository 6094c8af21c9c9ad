package machinemetrics_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/provider/internal/lifecycle"
	"github.com/anvil-metal/anvil/provider/internal/machinemetrics"
	"github.com/anvil-metal/anvil/provider/internal/machineview"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

func TestMachineGauges(t *testing.T) {
	t.Parallel()

	ctx := t.Context()

	store, err := resources.Open(ctx, t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { store.Close() })

	view := machineview.New()
	runView(t, view, store)

	reg := prometheus.NewRegistry()
	reg.MustRegister(machinemetrics.New(view, store, lifecycle.Policy{}))

	// Nothing yet: every known label, at 0.
	got := gather(t, reg)
	assert.Equal(t, map[string]float64{
		"unknown": 0, "pending": 0, "rejected": 0, "preparing": 0, "ready": 0, "allocated": 0, "installed": 0,
	}, got["anvil_machines"])
	assert.Equal(t, map[string]float64{"on": 0, "off": 0, "unknown": 0}, got["anvil_machines_power"])
	assert.Len(t, got["anvil_machines_bmc_condition"], 8)

	machine := func(id string, intent *resources.MachineIntentSpec, power *resources.PowerStatusSpec) {
		m := resources.NewMachine(id)
		m.TypedSpec().UUID = id
		require.NoError(t, store.Create(ctx, m))

		if intent != nil {
			in := resources.NewMachineIntent(id)
			*in.TypedSpec() = *intent
			require.NoError(t, store.Create(ctx, in))
		}

		if power != nil {
			ps := resources.NewPowerStatus(id)
			*ps.TypedSpec() = *power
			require.NoError(t, store.Create(ctx, ps))
		}
	}

	machine("m1", nil, nil)
	machine("m2", &resources.MachineIntentSpec{Acceptance: resources.AcceptanceAccepted}, &resources.PowerStatusSpec{State: resources.PowerOn, Condition: "ok"})
	machine("m3", &resources.MachineIntentSpec{
		Acceptance: resources.AcceptanceAccepted, Allocation: &resources.Allocation{ID: "a1", TalosVersion: "v1.9.0"},
	}, &resources.PowerStatusSpec{State: resources.PowerUnknown, Condition: "unreachable"})
	machine("m4", &resources.MachineIntentSpec{Acceptance: resources.AcceptanceRejected}, &resources.PowerStatusSpec{State: resources.PowerOff, Condition: "hands-off"})

	require.Eventually(t, func() bool { return len(view.All()) == 4 && view.Get("m4").Intent != nil }, 5*time.Second, time.Millisecond)

	got = gather(t, reg)
	assert.Equal(t, map[string]float64{
		"unknown": 0, "pending": 1, "rejected": 1, "preparing": 0, "ready": 1, "allocated": 1, "installed": 0,
	}, got["anvil_machines"])
	assert.Equal(t, map[string]float64{"on": 1, "off": 1, "unknown": 2}, got["anvil_machines_power"])
	assert.InDelta(t, 1, got["anvil_machines_bmc_condition"]["ok"], 0)
	assert.InDelta(t, 1, got["anvil_machines_bmc_condition"]["unreachable"], 0)
	assert.InDelta(t, 1, got["anvil_machines_bmc_condition"]["hands-off"], 0)
	assert.InDelta(t, 1, got["anvil_machines_bmc_condition"]["none"], 0, "a machine without a BMC config")
}

// runView runs view over store until the test ends, and waits for it to hold the state.
func runView(t *testing.T, view *machineview.View, store state.State) {
	t.Helper()

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)

	go func() { done <- view.Run(ctx, store) }()

	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})

	<-view.Ready()
}

// gather returns each family's values by its one label's value.
func gather(t *testing.T, reg *prometheus.Registry) map[string]map[string]float64 {
	t.Helper()

	families, err := reg.Gather()
	require.NoError(t, err)

	out := map[string]map[string]float64{}

	for _, f := range families {
		values := map[string]float64{}
		for _, m := range f.GetMetric() {
			require.Len(t, m.GetLabel(), 1)
			values[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
		}

		out[f.GetName()] = values
	}

	return out
}

// listCounter is a state that counts its List calls.
type listCounter struct {
	state.State
	lists atomic.Int32
}

func (s *listCounter) List(ctx context.Context, kind resource.Kind, opts ...state.ListOption) (resource.List, error) {
	s.lists.Add(1)

	return s.State.List(ctx, kind, opts...)
}

// TestStaleViewScrapedWithoutTheState: on a replica whose view may be stale (cut off from
// etcd, where a listing would wait out its timeout), a scrape counts the phases from the
// view, reports the power gauges as failed with the reason, and lists nothing; once the
// view is current again the power gauges come back.
func TestStaleViewScrapedWithoutTheState(t *testing.T) {
	t.Parallel()

	store, err := resources.Open(t.Context(), t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { store.Close() })

	var cutOff atomic.Bool

	view := machineview.New()
	view.Current = func() error {
		if cutOff.Load() {
			return errors.New("etcd not reached for 7s")
		}

		return nil
	}

	runView(t, view, store)

	st := &listCounter{State: store}
	reg := prometheus.NewRegistry()
	reg.MustRegister(machinemetrics.New(view, st, lifecycle.Policy{}))

	cutOff.Store(true)

	families, err := reg.Gather()
	require.ErrorContains(t, err, "etcd not reached for 7s")
	assert.Zero(t, st.lists.Load(), "a stale view's scrape listed the state")

	names := make([]string, 0, len(families))
	for _, f := range families {
		names = append(names, f.GetName())
	}

	assert.Equal(t, []string{"anvil_machines"}, names, "the phases, from the view, are still there")

	cutOff.Store(false)

	got := gather(t, reg)
	assert.Equal(t, map[string]float64{"on": 0, "off": 0, "unknown": 0}, got["anvil_machines_power"])
	assert.Equal(t, int32(1), st.lists.Load())
}
