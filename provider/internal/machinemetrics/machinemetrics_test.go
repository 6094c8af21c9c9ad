package machinemetrics_test

import (
	"context"
	"testing"
	"time"

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
	viewCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)

	go func() { done <- view.Run(viewCtx, store) }()

	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})

	<-view.Ready()

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
