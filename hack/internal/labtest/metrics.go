package labtest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Metrics is a provider's /metrics page (Prometheus' text format).
type Metrics string

// ScrapeMetrics reads the /metrics page at url with client.
func ScrapeMetrics(ctx context.Context, client *http.Client, url string) (Metrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", fmt.Errorf("error making the request of %s: %w", url, err)
	}

	resp, err := client.Do(req)
	if err != nil {
		return "", fmt.Errorf("error reading %s: %w", url, err)
	}
	defer resp.Body.Close()

	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return "", fmt.Errorf("error reading %s: %w", url, err)
	}

	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", url, resp.Status)
	}

	return Metrics(b), nil
}

// Sum is the sum of the samples of metric name (a counter, gauge or untyped) whose
// labels include every one of labels ("key", "value" pairs): 0 when there is none, or
// when the page does not parse.
func (m Metrics) Sum(name string, labels ...string) float64 {
	parser := expfmt.NewTextParser(model.UTF8Validation)

	families, err := parser.TextToMetricFamilies(strings.NewReader(string(m)))
	if err != nil {
		return 0
	}

	var sum float64

	for _, s := range families[name].GetMetric() {
		if hasLabels(s.GetLabel(), labels) {
			sum += s.GetCounter().GetValue() + s.GetGauge().GetValue() + s.GetUntyped().GetValue()
		}
	}

	return sum
}

func hasLabels(have []*dto.LabelPair, want []string) bool {
	for i := 0; i+1 < len(want); i += 2 {
		if !slices.ContainsFunc(have, func(l *dto.LabelPair) bool { return l.GetName() == want[i] && l.GetValue() == want[i+1] }) {
			return false
		}
	}

	return true
}
