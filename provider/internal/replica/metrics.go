package replica

import "github.com/prometheus/client_golang/prometheus"

// Metrics are a replica's: whether it leads, how often it took over, the leader writes
// etcd refused, and etcd's latency as the health probe sees it.
type Metrics struct {
	leader    prometheus.Gauge
	takeovers prometheus.Counter
	fenced    prometheus.Counter
	latency   prometheus.Histogram
	ready     prometheus.Gauge
}

// NewMetrics registers the metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "anvil_replica_leader", Help: "1 while this replica leads its site (runs power, schematics, labels, auto-accept, Omni).",
		}),
		takeovers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "anvil_replica_takeovers_total", Help: "Times this replica was elected leader.",
		}),
		fenced: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "anvil_replica_fenced_writes_total", Help: "Writes of this replica etcd refused because it no longer led when they arrived.",
		}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "anvil_replica_etcd_latency_seconds", Help: "Time of the health probe's linearizable read of etcd.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}),
		ready: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "anvil_replica_ready", Help: "1 while this replica serves machines: its view of the state is current and etcd answers.",
		}),
	}

	reg.MustRegister(m.leader, m.takeovers, m.fenced, m.latency, m.ready)

	return m
}

func (m *Metrics) elected() {
	if m != nil {
		m.leader.Set(1)
		m.takeovers.Inc()
	}
}

func (m *Metrics) deposed() {
	if m != nil {
		m.leader.Set(0)
	}
}

func (m *Metrics) fencedWrite() {
	if m != nil {
		m.fenced.Inc()
	}
}

func (m *Metrics) probed(seconds float64, ok bool) {
	if m == nil {
		return
	}

	if ok {
		m.latency.Observe(seconds)
	}
}

func (m *Metrics) setReady(ok bool) {
	if m == nil {
		return
	}

	if ok {
		m.ready.Set(1)
	} else {
		m.ready.Set(0)
	}
}
