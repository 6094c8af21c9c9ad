package agentapi

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// metrics are the agent API's: its sessions, the orders sent, and the wipes agents
// reported.
type metrics struct {
	sessions      prometheus.Gauge
	sessionsTotal prometheus.Counter
	orders        *prometheus.CounterVec
	refused       *prometheus.CounterVec
	wipeSeconds   *prometheus.HistogramVec
	wipeBytes     *prometheus.CounterVec
}

// Labels known in advance: their children exist from the start, at 0, for dashboards.
var (
	orderKinds     = []string{"hold", "release", "wipe", "reboot", "power-off", "kexec", "bmc", "unknown"}
	refusalReasons = []string{"timeout", "protocol", "token", "superseded", "unsolicited", "identity"}
)

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		sessions: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "anvil_agent_sessions", Help: "Agents connected.",
		}),
		sessionsTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "anvil_agent_sessions_total", Help: "Agent sessions accepted (a hello with a valid token).",
		}),
		orders: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "anvil_agent_orders_total", Help: "Orders sent to agents, by kind.",
		}, []string{"kind"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "anvil_agent_sessions_refused_total", Help: "Agent sessions refused, by reason.",
		}, []string{"reason"}),
		wipeSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "anvil_wipe_duration_seconds",
			Help: "Time a machine's wipe took (its disks', one after the other, as its agent reported them), by wipe mode.",
			// From a fast wipe's few seconds to zeroing large disks.
			Buckets: []float64{1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 43200},
		}, []string{"mode"}),
		wipeBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "anvil_wipe_bytes_total", Help: "Bytes wiped (written or erased, as agents reported them), by wipe mode.",
		}, []string{"mode"}),
	}

	for _, k := range orderKinds {
		m.orders.WithLabelValues(k)
	}

	for _, r := range refusalReasons {
		m.refused.WithLabelValues(r)
	}

	for _, mode := range resources.WipeModes {
		m.wipeSeconds.WithLabelValues(mode)
		m.wipeBytes.WithLabelValues(mode)
	}

	if reg != nil {
		reg.MustRegister(m.sessions, m.sessionsTotal, m.orders, m.refused, m.wipeSeconds, m.wipeBytes)
	}

	return m
}

// observeWipe counts a wipe done in mode.
func (m *metrics) observeWipe(mode string, record resources.WipeRecord) {
	var (
		ms    uint64
		bytes uint64
	)

	for _, d := range record.Disks {
		ms += d.DurationMs
		bytes += d.Bytes
	}

	m.wipeSeconds.WithLabelValues(mode).Observe(float64(ms) / 1000)
	m.wipeBytes.WithLabelValues(mode).Add(float64(bytes))
}
