package agentapi_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	agentv1 "github.com/anvil-metal/anvil/api/agent/v1"
	"github.com/anvil-metal/anvil/internal/token"
	"github.com/anvil-metal/anvil/provider/internal/agentapi"
	"github.com/anvil-metal/anvil/provider/internal/boottrace"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// An accepted session marks the agent registered and is counted; a wipe owed and
// reported done is timed and its bytes counted under its mode, once however often the
// agent sends the report.
func TestRegistrationAndWipeMetrics(t *testing.T) {
	t.Parallel()

	reg := prometheus.NewRegistry()
	trace := boottrace.New(nil)

	f := newFixtureWith(t, func(o *agentapi.Options) {
		o.Registry = reg
		o.Trace = trace
	})
	ctx := t.Context()

	m := resources.NewMachine(machineID)
	m.TypedSpec().Firmware = "bios"
	require.NoError(t, f.store.Create(ctx, m))

	in := resources.NewMachineIntent(machineID)
	in.TypedSpec().Acceptance = resources.AcceptanceAccepted
	in.TypedSpec().WipeID = "w1"
	in.TypedSpec().WipeMode = resources.WipeModeZeroes
	require.NoError(t, f.store.Create(ctx, in))

	require.Eventually(t, func() bool {
		e := f.view.Get(machineID)

		return e != nil && e.Intent != nil && e.Machine != nil
	}, 5*time.Second, time.Millisecond)

	values := gather(t, reg)
	assert.Contains(t, values, `anvil_wipe_bytes_total{mode="secure-erase"}`, "every mode's series exists from the start")
	assert.Contains(t, values, `anvil_agent_orders_total{kind="kexec"}`)
	assert.Contains(t, values, `anvil_agent_sessions_refused_total{reason="superseded"}`)
	assert.InDelta(t, 0, values["anvil_agent_sessions_total"], 0)

	stream, err := f.hello(t, token.Sign(f.key, token.Claims{Kind: token.KindAgent, MachineID: machineID, Issued: time.Now()}))
	require.NoError(t, err)

	marks := trace.Timeline(machineID)
	require.Len(t, marks, 1)
	assert.Equal(t, boottrace.PhaseAgentRegistered, marks[0].Phase)
	assert.Equal(t, "bios", marks[0].Firmware)
	assert.InDelta(t, 1, gather(t, reg)["anvil_agent_sessions_total"], 0)

	o := nextOrder(t, stream)
	require.Equal(t, "wipe-w1", o.GetId())

	report := &agentv1.AgentMessage{Message: &agentv1.AgentMessage_Result{Result: &agentv1.OrderResult{
		OrderId: o.GetId(), Status: agentv1.OrderResult_STATUS_DONE, Wipe: &agentv1.WipeReport{GenerationId: "w1", Disks: []*agentv1.DiskWipe{
			{Device: "sda", Method: "zeroes", Bytes: 1000, DurationMs: 1500},
			{Device: "sdb", Method: "zeroes", Bytes: 500, DurationMs: 500},
			{Device: "sdc", Skipped: "removable"},
		}},
	}}}

	require.NoError(t, stream.Send(report))
	require.Eventually(t, func() bool { return gather(t, reg)[`anvil_wipe_bytes_total{mode="zeroes"}`] == 1500 }, 5*time.Second, time.Millisecond)

	values = gather(t, reg)
	assert.InDelta(t, 1, values[`anvil_wipe_duration_seconds_count{mode="zeroes"}`], 0)
	assert.InDelta(t, 2, values[`anvil_wipe_duration_seconds_sum{mode="zeroes"}`], 1e-9, "the disks one after the other")

	// The wipe recorded (as MachineStatusController would), the same report again (an
	// agent sends its results again in each session) is neither recorded nor counted
	// twice.
	st := resources.NewMachineStatus(machineID)
	st.TypedSpec().WipedID = "w1"
	require.NoError(t, f.store.Create(ctx, st))

	require.Eventually(t, func() bool {
		e := f.view.Get(machineID)

		return e.Status != nil && e.Status.WipedID == "w1"
	}, 5*time.Second, time.Millisecond)

	require.NoError(t, stream.Send(report))
	f.handled(t, stream, 1)

	f.rec.mu.Lock()
	assert.Len(t, f.rec.wiped, 1)
	f.rec.mu.Unlock()

	assert.InDelta(t, 1500, gather(t, reg)[`anvil_wipe_bytes_total{mode="zeroes"}`], 0)
}

// gather returns every sample by its name and labels, Prometheus' text style; a
// histogram as its _count and _sum.
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()

	families, err := reg.Gather()
	require.NoError(t, err)

	out := map[string]float64{}

	for _, f := range families {
		for _, m := range f.GetMetric() {
			labels := ""

			for i, l := range m.GetLabel() {
				if i > 0 {
					labels += ","
				}

				labels += l.GetName() + `="` + l.GetValue() + `"`
			}

			if labels != "" {
				labels = "{" + labels + "}"
			}

			switch f.GetType() {
			case dto.MetricType_HISTOGRAM:
				out[f.GetName()+"_count"+labels] = float64(m.GetHistogram().GetSampleCount())
				out[f.GetName()+"_sum"+labels] = m.GetHistogram().GetSampleSum()
			case dto.MetricType_GAUGE:
				out[f.GetName()+labels] = m.GetGauge().GetValue()
			default:
				out[f.GetName()+labels] = m.GetCounter().GetValue()
			}
		}
	}

	return out
}
