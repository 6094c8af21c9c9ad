package power_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/provider/internal/power"
)

// stubClient answers each call with err, PXE-once with ErrUnsupported.
type stubClient struct{ err error }

func (c stubClient) PowerState(context.Context) (bool, error)         { return true, c.err }
func (c stubClient) PowerOn(context.Context) error                    { return c.err }
func (c stubClient) PowerOff(context.Context) error                   { return c.err }
func (c stubClient) PowerCycle(context.Context) error                 { return c.err }
func (c stubClient) SetPXEOnce(context.Context, power.BootMode) error { return power.ErrUnsupported }
func (c stubClient) Close() error                                     { return nil }

func TestInstrumentedCalls(t *testing.T) {
	t.Parallel()

	reg := prometheus.NewRegistry()
	m := power.NewMetrics(reg)

	failing := errors.New("BMC unreachable")
	ipmi := m.Instrument(power.BackendIPMI, func(_ context.Context, ep power.Endpoint) (power.Client, error) {
		if ep.Address == "down" {
			return nil, fmt.Errorf("dial: %w", power.ErrUnreachable)
		}

		return stubClient{}, nil
	})
	redfish := m.Instrument(power.BackendRedfish, func(context.Context, power.Endpoint) (power.Client, error) {
		return stubClient{err: failing}, nil
	})

	ctx := t.Context()

	_, err := ipmi(ctx, power.Endpoint{Address: "down"})
	require.ErrorIs(t, err, power.ErrUnreachable, "errors come back as they were")

	c, err := ipmi(ctx, power.Endpoint{Address: "up"})
	require.NoError(t, err)

	on, err := c.PowerState(ctx)
	require.NoError(t, err)
	assert.True(t, on)
	require.ErrorIs(t, c.SetPXEOnce(ctx, power.BootModeAuto), power.ErrUnsupported)
	require.NoError(t, c.PowerCycle(ctx))
	require.NoError(t, c.Close())

	c, err = redfish(ctx, power.Endpoint{})
	require.NoError(t, err)
	require.ErrorIs(t, c.PowerOff(ctx), failing)
	require.ErrorIs(t, c.PowerOn(ctx), failing)

	errs := func(backend power.Backend, op string) float64 {
		return series(t, reg, "anvil_bmc_call_errors_total", string(backend), op).GetCounter().GetValue()
	}
	calls := func(backend power.Backend, op string) uint64 {
		return series(t, reg, "anvil_bmc_call_duration_seconds", string(backend), op).GetHistogram().GetSampleCount()
	}

	assert.InDelta(t, 1, errs(power.BackendIPMI, power.OpDial), 0)
	assert.InDelta(t, 0, errs(power.BackendIPMI, power.OpPowerStatus), 0)
	assert.InDelta(t, 0, errs(power.BackendIPMI, power.OpPXEOnce), 0, "not offering PXE-once is no failure")
	assert.InDelta(t, 1, errs(power.BackendRedfish, power.OpPowerOff), 0)
	assert.InDelta(t, 1, errs(power.BackendRedfish, power.OpPowerOn), 0)
	assert.InDelta(t, 0, errs(power.BackendAPI, power.OpCycle), 0, "every backend's children exist from the start")

	// Every call is timed, failed or not.
	families, err := reg.Gather()
	require.NoError(t, err)

	for _, f := range families {
		assert.Len(t, f.GetMetric(), 3*7, "%s: every backend's and operation's child", f.GetName())
	}

	assert.Equal(t, uint64(2), calls(power.BackendIPMI, power.OpDial))
	assert.Equal(t, uint64(1), calls(power.BackendIPMI, power.OpClose))
	assert.Equal(t, uint64(0), calls(power.BackendAPI, power.OpDial))

	var none *power.Metrics

	dial := func(context.Context, power.Endpoint) (power.Client, error) { return stubClient{}, nil }
	assert.NotNil(t, none.Instrument(power.BackendAPI, dial), "a nil *Metrics leaves dialers as they are")
}

// series is the family's child with the backend and operation labels.
func series(t *testing.T, reg *prometheus.Registry, name, backend, op string) *dto.Metric {
	t.Helper()

	families, err := reg.Gather()
	require.NoError(t, err)

	for _, f := range families {
		if f.GetName() != name {
			continue
		}

		for _, m := range f.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}

			if got["backend"] == backend && got["operation"] == op {
				return m
			}
		}
	}

	t.Fatalf("no %s{backend=%q,operation=%q}", name, backend, op)

	return nil
}
