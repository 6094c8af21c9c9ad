package httpapi

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/anvil-metal/anvil/provider/internal/lifecycle"
)

type metrics struct {
	scripts *prometheus.CounterVec
	// scriptsByKind are scripts' children, resolved once: every boot counts, and a
	// label lookup per request is work the hot path need not do.
	scriptsByKind    map[lifecycle.Boot]prometheus.Counter
	badRequests      prometheus.Counter
	observationsLost prometheus.Counter
	unconfirmed      prometheus.Counter
	metadata         *prometheus.CounterVec
	events           *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		scripts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "anvil_boot_scripts_total", Help: "Boot scripts served, by decision.",
		}, []string{"decision"}),
		badRequests: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "anvil_boot_script_bad_requests_total", Help: "Boot-script requests refused as malformed.",
		}),
		observationsLost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "anvil_pxe_observations_dropped_total", Help: "PXE observations dropped because the machine controller was behind.",
		}),
		unconfirmed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "anvil_boot_decisions_unconfirmed_total",
			Help: "Boots away from the agent (disk, Talos) answered 503 because the machine's intent could not be read from the state to confirm them.",
		}),
		metadata: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "anvil_metadata_requests_total", Help: "Metadata (talos.config) requests, by result.",
		}, []string{"result"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "anvil_event_sink_events_total", Help: "Talos events received, by result.",
		}, []string{"result"}),
	}

	m.scriptsByKind = map[lifecycle.Boot]prometheus.Counter{}
	for _, k := range []lifecycle.Boot{lifecycle.BootAgent, lifecycle.BootTalos, lifecycle.BootDisk} {
		m.scriptsByKind[k] = m.scripts.WithLabelValues(string(k))
	}

	// Children with known labels exist from the start, at 0, for dashboards to find.
	for _, result := range []string{"served", "forbidden", "superseded", "empty", "replayed", "held", "kexec-only", "tls-required"} {
		m.metadata.WithLabelValues(result)
	}

	for _, result := range []string{"installed", "ignored", "malformed", "refused"} {
		m.events.WithLabelValues(result)
	}

	reg.MustRegister(m.scripts, m.badRequests, m.observationsLost, m.unconfirmed, m.metadata, m.events)

	return m
}
