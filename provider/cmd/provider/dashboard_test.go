package main_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/anvil-metal/anvil/internal/testprovider"
	"github.com/anvil-metal/anvil/provider/internal/service"
)

// The dashboard model, as much of it as the dashboard uses: decoding refuses any other
// key, so a misspelt one fails here rather than in Grafana.
type (
	dashboard struct {
		Annotations          json.RawMessage   `json:"annotations"`
		Description          string            `json:"description"`
		Editable             bool              `json:"editable"`
		FiscalYearStartMonth int               `json:"fiscalYearStartMonth"`
		GraphTooltip         int               `json:"graphTooltip"`
		ID                   *int              `json:"id"`
		Links                []json.RawMessage `json:"links"`
		Panels               []panel           `json:"panels"`
		Refresh              string            `json:"refresh"`
		SchemaVersion        int               `json:"schemaVersion"`
		Tags                 []string          `json:"tags"`
		Templating           struct {
			List []variable `json:"list"`
		} `json:"templating"`
		Time       json.RawMessage `json:"time"`
		Timepicker json.RawMessage `json:"timepicker"`
		Timezone   string          `json:"timezone"`
		Title      string          `json:"title"`
		UID        string          `json:"uid"`
		Version    int             `json:"version"`
		WeekStart  string          `json:"weekStart"`
	}

	datasource struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	}

	gridPos struct {
		H int `json:"h"`
		W int `json:"w"`
		X int `json:"x"`
		Y int `json:"y"`
	}

	panel struct {
		ID          int             `json:"id"`
		Type        string          `json:"type"`
		Title       string          `json:"title"`
		Description string          `json:"description"`
		Datasource  *datasource     `json:"datasource"`
		GridPos     gridPos         `json:"gridPos"`
		FieldConfig json.RawMessage `json:"fieldConfig"`
		Options     json.RawMessage `json:"options"`
		Targets     []target        `json:"targets"`
		Collapsed   bool            `json:"collapsed"`
		Panels      []panel         `json:"panels"`
	}

	target struct {
		RefID        string      `json:"refId"`
		Datasource   *datasource `json:"datasource"`
		Expr         string      `json:"expr"`
		LegendFormat string      `json:"legendFormat"`
		Range        bool        `json:"range"`
		EditorMode   string      `json:"editorMode"`
	}

	variable struct {
		Name        string            `json:"name"`
		Label       string            `json:"label"`
		Type        string            `json:"type"`
		Datasource  *datasource       `json:"datasource"`
		Definition  string            `json:"definition"`
		Query       json.RawMessage   `json:"query"`
		Current     json.RawMessage   `json:"current"`
		Hide        int               `json:"hide"`
		IncludeAll  bool              `json:"includeAll"`
		AllValue    string            `json:"allValue"`
		Multi       bool              `json:"multi"`
		Options     []json.RawMessage `json:"options"`
		Refresh     int               `json:"refresh"`
		Regex       string            `json:"regex"`
		SkipURLSync bool              `json:"skipUrlSync"`
		Sort        int               `json:"sort"`
	}
)

// dashboardFile is the dashboard, from this package's directory.
var dashboardFile = filepath.Join("..", "..", "..", "deploy", "grafana", "anvil-dashboard.json")

func loadDashboard(t *testing.T) dashboard {
	t.Helper()

	raw, err := os.ReadFile(dashboardFile)
	require.NoError(t, err)

	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()

	var d dashboard
	require.NoError(t, dec.Decode(&d), "the dashboard decodes strictly")
	require.ErrorIs(t, dec.Decode(&struct{}{}), io.EOF, "one JSON document")

	return d
}

// TestDashboardMetricsExist: every metric the Grafana dashboard queries is in the
// /metrics of a provider just started (series with known labels exist from the start,
// at 0), and the dashboard is well formed: every panel on the ${datasource} variable,
// every graph with queries, panels inside the grid.
func TestDashboardMetricsExist(t *testing.T) {
	t.Parallel()

	d := loadDashboard(t)

	assert.NotEmpty(t, d.Title)
	assert.NotEmpty(t, d.UID)
	assert.GreaterOrEqual(t, d.SchemaVersion, 36)

	var dsVar bool

	for _, v := range d.Templating.List {
		if v.Name == "datasource" {
			dsVar = v.Type == "datasource" && string(v.Query) == `"prometheus"`
		}
	}

	require.True(t, dsVar, "a Prometheus datasource variable named datasource")

	wanted := map[string][]string{} // metric → the panels that query it
	ids := map[int]bool{}

	var boxes []gridPos

	for _, p := range flatten(d.Panels) {
		assert.False(t, ids[p.ID], "panel id %d is unique", p.ID)
		ids[p.ID] = true

		require.NotNil(t, p.Datasource, "panel %q has a datasource", p.Title)
		assert.Equal(t, datasource{Type: "prometheus", UID: "${datasource}"}, *p.Datasource, p.Title)
		assert.True(t, p.GridPos.W > 0 && p.GridPos.H > 0 && p.GridPos.X >= 0 && p.GridPos.X+p.GridPos.W <= 24, "panel %q fits the grid", p.Title)

		for _, b := range boxes {
			overlap := p.GridPos.X < b.X+b.W && b.X < p.GridPos.X+p.GridPos.W && p.GridPos.Y < b.Y+b.H && b.Y < p.GridPos.Y+p.GridPos.H
			assert.False(t, overlap, "panel %q overlaps another", p.Title)
		}

		boxes = append(boxes, p.GridPos)

		if p.Type == "row" {
			continue
		}

		require.NotEmpty(t, p.Targets, "panel %q has queries", p.Title)

		for _, tg := range p.Targets {
			assert.NotEmpty(t, tg.RefID, p.Title)
			require.NotNil(t, tg.Datasource, "a query of panel %q has a datasource", p.Title)
			assert.Equal(t, "${datasource}", tg.Datasource.UID, p.Title)

			names, err := metricNames(tg.Expr)
			require.NoError(t, err, "%s: %s", p.Title, tg.Expr)
			require.NotEmpty(t, names, "%s: %s names no metric", p.Title, tg.Expr)

			for _, n := range names {
				wanted[n] = append(wanted[n], p.Title)
			}
		}
	}

	for _, v := range d.Templating.List {
		if m, ok := strings.CutPrefix(v.Definition, "label_values("); ok {
			metric, _, _ := strings.Cut(m, ",")
			wanted[strings.TrimSpace(metric)] = append(wanted[strings.TrimSpace(metric)], "variable "+v.Name)
		}
	}

	exposed := scrapeProvider(t)

	for name, panels := range wanted {
		found := exposed[name]

		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); ok && exposed[base] {
				found = true
			}
		}

		assert.True(t, found, "%s, queried by %v, is not in /metrics", name, panels)
	}
}

func flatten(panels []panel) []panel {
	var out []panel

	for _, p := range panels {
		out = append(out, p)
		out = append(out, flatten(p.Panels)...)
	}

	return out
}

// scrapeProvider runs a provider in this process on loopback, standalone, with an empty
// state, and returns the metric names its /metrics exposes (the families' names, and
// each sample's).
func scrapeProvider(t *testing.T) map[string]bool {
	t.Helper()

	port := testprovider.FreePort(t, "tcp")

	opts := service.DefaultOptions
	opts.StateDir = t.TempDir()
	opts.APIAdvertiseAddress = "127.0.0.1"
	opts.APIListenAddress = "127.0.0.1"
	opts.APIPort = port
	opts.DHCPProxyIfaceOrIP = "lo"
	opts.DHCPProxyPort = testprovider.FreePort(t, "udp")
	opts.DHCPBootServerPort = testprovider.FreePort(t, "udp")
	opts.TFTPListenAddress = fmt.Sprintf("127.0.0.1:%d", testprovider.FreePort(t, "udp"))
	opts.TFTPRoot = t.TempDir()
	opts.AgentAssetsDir = t.TempDir()
	// Never reached: no machine is allocated.
	opts.ImageFactoryBaseURL = "http://127.0.0.1:1"
	// The console has a port of its own by default, which parallel tests would share.
	opts.UIListenAddress = ""

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)

	go func() { done <- service.Run(ctx, opts, zaptest.NewLogger(t)) }()

	t.Cleanup(func() {
		cancel()

		select {
		case err := <-done:
			assert.NoError(t, err)
		case <-time.After(15 * time.Second):
			t.Error("the provider did not stop")
		}
	})

	base := fmt.Sprintf("http://127.0.0.1:%d", port)

	for deadline := time.Now().Add(15 * time.Second); ; {
		select {
		case err := <-done:
			done <- err // for the cleanup
			require.FailNow(t, "the provider stopped", "%v", err)
		default:
		}

		if resp, err := http.Get(base + "/healthz"); err == nil {
			resp.Body.Close()

			if resp.StatusCode == http.StatusOK {
				break
			}
		}

		require.True(t, time.Now().Before(deadline), "the provider did not come up")
		time.Sleep(20 * time.Millisecond)
	}

	resp, err := http.Get(base + "/metrics")
	require.NoError(t, err)

	defer resp.Body.Close()

	require.Equal(t, http.StatusOK, resp.StatusCode)

	names := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)

	for sc.Scan() {
		line := sc.Text()

		switch {
		case strings.HasPrefix(line, "# TYPE "):
			if f := strings.Fields(line); len(f) >= 3 {
				names[f[2]] = true
			}
		case line == "" || strings.HasPrefix(line, "#"):
		default:
			if i := strings.IndexAny(line, "{ "); i > 0 {
				names[line[:i]] = true
			}
		}
	}

	require.NoError(t, sc.Err())
	require.True(t, names["anvil_boot_scripts_total"], "the scrape has Anvil's metrics")

	return names
}

// PromQL's words that are not metric names: aggregations, and the keywords that take a
// list of label names in parentheses.
var (
	aggregations = []string{
		"sum", "avg", "min", "max", "count", "stddev", "stdvar", "topk", "bottomk", "quantile", "count_values", "group", "limitk", "limit_ratio",
	}
	labelLists = []string{"by", "without", "on", "ignoring", "group_left", "group_right"}
	keywords   = []string{"bool", "offset", "and", "or", "unless", "atan2", "inf", "nan"}
)

// metricNames returns the metric names a PromQL expression selects: identifiers that are
// not functions (followed by a parenthesis), aggregations or keywords, outside label
// matchers, label lists, ranges, strings and $-variables.
func metricNames(expr string) ([]string, error) {
	var names []string

	for i := 0; i < len(expr); {
		c := expr[i]

		switch {
		case c == '"' || c == '\'' || c == '`':
			end, err := skipString(expr, i)
			if err != nil {
				return nil, err
			}

			i = end
		case c == '{':
			end, err := skipGroup(expr, i, '{', '}')
			if err != nil {
				return nil, err
			}

			i = end
		case c == '[':
			end, err := skipGroup(expr, i, '[', ']')
			if err != nil {
				return nil, err
			}

			i = end
		case c == '$':
			i++
			if i < len(expr) && expr[i] == '{' {
				end, err := skipGroup(expr, i, '{', '}')
				if err != nil {
					return nil, err
				}

				i = end

				continue
			}

			for i < len(expr) && isIdent(expr[i]) {
				i++
			}
		case c >= '0' && c <= '9' || c == '.':
			for i < len(expr) && (isIdent(expr[i]) || expr[i] == '.') {
				i++
			}
		case isIdentStart(c):
			start := i
			for i < len(expr) && isIdent(expr[i]) {
				i++
			}

			word := expr[start:i]
			next := i
			for next < len(expr) && (expr[next] == ' ' || expr[next] == '\t' || expr[next] == '\n') {
				next++
			}

			paren := next < len(expr) && expr[next] == '('

			// Keywords are not case-sensitive; metric names are.
			lower := strings.ToLower(word)

			switch {
			case slices.Contains(labelLists, lower):
				if paren {
					end, err := skipGroup(expr, next, '(', ')')
					if err != nil {
						return nil, err
					}

					i = end
				}
			case paren, slices.Contains(aggregations, lower), slices.Contains(keywords, lower):
				// A function, an aggregation or a keyword.
			default:
				names = append(names, word)
			}
		default:
			i++
		}
	}

	return names, nil
}

func isIdentStart(c byte) bool {
	return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func isIdent(c byte) bool { return isIdentStart(c) || c >= '0' && c <= '9' }

// skipString returns the index after the string literal starting at i.
func skipString(s string, i int) (int, error) {
	quote := s[i]

	for j := i + 1; j < len(s); j++ {
		switch {
		case s[j] == '\\' && quote != '`':
			j++
		case s[j] == quote:
			return j + 1, nil
		}
	}

	return 0, fmt.Errorf("unterminated string at %d", i)
}

// skipGroup returns the index after the group opened at i, nested groups and strings
// inside it skipped.
func skipGroup(s string, i int, open, closing byte) (int, error) {
	depth := 0

	for j := i; j < len(s); {
		switch s[j] {
		case '"', '\'', '`':
			end, err := skipString(s, j)
			if err != nil {
				return 0, err
			}

			j = end

			continue
		case open:
			depth++
		case closing:
			depth--
			if depth == 0 {
				return j + 1, nil
			}
		}

		j++
	}

	return 0, errors.New("unbalanced " + string(open) + string(closing))
}

func TestMetricNames(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		expr string
		want []string
	}{
		{`up`, []string{"up"}},
		{
			`histogram_quantile(0.95, sum by (le, phase) (rate(anvil_boot_phase_duration_seconds_bucket{instance=~"$instance"}[$__rate_interval])))`,
			[]string{"anvil_boot_phase_duration_seconds_bucket"},
		},
		{`sum without (instance) (a_total) / on (job) group_left (x) b{l="}{[("} * 60`, []string{"a_total", "b"}},
		{`rate(x[5m] offset 1h) > bool 1e-9 and y unless z or w`, []string{"x", "y", "z", "w"}},
		{"sum by (le) (rate(x_count{a='b\\'c'}[${__range}]))", []string{"x_count"}},
		{`count(up) BY (job)`, []string{"up"}},
	} {
		got, err := metricNames(tc.expr)
		require.NoError(t, err, tc.expr)
		assert.Equal(t, tc.want, got, tc.expr)
	}

	for _, bad := range []string{`rate(x{a="b}[5m])`, `x{a="b"`, `sum(rate(x[5m)`} {
		_, err := metricNames(bad)
		assert.Error(t, err, bad)
	}
}
