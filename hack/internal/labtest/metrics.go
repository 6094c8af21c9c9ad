package labtest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
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

// Sum is the sum of the samples of metric name whose labels include every one of
// labels ("key", "value" pairs): 0 when there is none.
func (m Metrics) Sum(name string, labels ...string) float64 {
	var sum float64

	for line := range strings.Lines(string(m)) {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' || !strings.HasPrefix(line, name) {
			continue
		}

		series, value, ok := cutLast(line)
		if !ok {
			continue
		}

		got, have := parseSeries(series)
		if got != name || !hasLabels(have, labels) {
			continue
		}

		if v, err := strconv.ParseFloat(value, 64); err == nil {
			sum += v
		}
	}

	return sum
}

// cutLast splits a sample line into its series and its value (a timestamp after the
// value is not written by the provider).
func cutLast(line string) (series, value string, ok bool) {
	i := strings.LastIndexByte(line, ' ')
	if i < 0 {
		return "", "", false
	}

	return line[:i], line[i+1:], true
}

// parseSeries reads name{k="v",…}; label values with quotes or commas in them are not
// the provider's.
func parseSeries(s string) (string, map[string]string) {
	name, rest, found := strings.Cut(s, "{")
	if !found {
		return s, nil
	}

	labels := map[string]string{}

	for pair := range strings.SplitSeq(strings.TrimSuffix(rest, "}"), ",") {
		k, v, ok := strings.Cut(pair, "=")
		if ok {
			labels[k] = strings.Trim(v, `"`)
		}
	}

	return name, labels
}

func hasLabels(have map[string]string, want []string) bool {
	for i := 0; i+1 < len(want); i += 2 {
		if have[want[i]] != want[i+1] {
			return false
		}
	}

	return true
}
