// Package tampertest reads what a tamper.Reporter counted, for tests.
package tampertest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/provider/internal/tamper"
)

// Count is the number of security events of the kind counted in reg; the test fails
// when reg has no such series (no Reporter registered there).
func Count(t testing.TB, reg prometheus.Gatherer, kind tamper.Kind) float64 {
	t.Helper()

	families, err := reg.Gather()
	require.NoError(t, err)

	for _, mf := range families {
		if mf.GetName() != "anvil_security_events_total" {
			continue
		}

		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "kind" && l.GetValue() == string(kind) {
					return m.GetCounter().GetValue()
				}
			}
		}
	}

	require.Failf(t, "no security events counted", "kind %s", kind)

	return 0
}
