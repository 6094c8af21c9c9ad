package httpapi_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"go.uber.org/zap/zaptest"

	"github.com/anvil-metal/anvil/provider/internal/httpapi"
)

// failing is a collector whose one metric fails, as the machines' power gauges do on a
// replica cut off from etcd.
type failing struct{ desc *prometheus.Desc }

func (f failing) Describe(ch chan<- *prometheus.Desc) { ch <- f.desc }

func (f failing) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.NewInvalidMetric(f.desc, errors.New("etcd not reached for 7s"))
}

// TestMetricsServedPastAFailingCollector: one collector failing leaves its metrics out of
// the scrape, not the others: a replica cut off from etcd still says it is not ready and
// what it left unanswered.
func TestMetricsServedPastAFailingCollector(t *testing.T) {
	t.Parallel()

	reg := prometheus.NewRegistry()
	ready := prometheus.NewGauge(prometheus.GaugeOpts{Name: "anvil_replica_ready", Help: "ready"})
	reg.MustRegister(ready, failing{prometheus.NewDesc("anvil_machines_power", "power", nil, nil)})

	f := newFixture(t)
	f.server = httpapi.New(httpapi.Options{
		State: f.store, View: f.view, Scripts: f.scripts, Observations: f.obs, Installs: f.rec,
		Registry: reg, Logger: zaptest.NewLogger(t),
	})

	rec := httptest.NewRecorder()
	f.server.Handler().ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/metrics", nil))

	assert.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	assert.Contains(t, rec.Body.String(), "anvil_replica_ready 0")
	assert.NotContains(t, rec.Body.String(), "anvil_machines_power")
}
