package omnilink

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSyncLag(t *testing.T) {
	t.Parallel()

	const id = "m1"

	type step struct {
		after time.Duration
		do    func(l *SyncLag, start time.Time)
	}

	arrived := func(l *SyncLag, _ time.Time) { l.Arrived(id) }
	applied := func(changed bool) func(*SyncLag, time.Time) {
		return func(l *SyncLag, _ time.Time) { l.Applied(id, changed) }
	}
	// reported is a status reconcile that read its inputs `read` after the test's start.
	reported := func(read time.Duration) func(*SyncLag, time.Time) {
		return func(l *SyncLag, start time.Time) { l.Reported(id, start.Add(read)) }
	}

	for _, tc := range []struct {
		name           string
		steps          []step
		intent, status []float64
	}{
		{
			name:   "intent changed, then its status",
			steps:  []step{{0, arrived}, {100 * time.Millisecond, applied(true)}, {50 * time.Millisecond, reported(120 * time.Millisecond)}},
			intent: []float64{0.1}, status: []float64{0.15},
		},
		{
			name: "a status read before the intent changed is not the one written back",
			steps: []step{
				{0, arrived}, {10 * time.Millisecond, reported(5 * time.Millisecond)},
				{90 * time.Millisecond, applied(true)}, {100 * time.Millisecond, reported(150 * time.Millisecond)},
			},
			intent: []float64{0.1}, status: []float64{0.2},
		},
		{
			name:   "an unchanged intent: the status stored after the change arrived stands",
			steps:  []step{{0, arrived}, {10 * time.Millisecond, reported(5 * time.Millisecond)}, {90 * time.Millisecond, applied(false)}},
			intent: []float64{0.1}, status: []float64{0.01},
		},
		{
			name:   "an unchanged intent, its status after it",
			steps:  []step{{0, arrived}, {10 * time.Millisecond, applied(false)}, {10 * time.Millisecond, reported(15 * time.Millisecond)}},
			intent: []float64{0.01}, status: []float64{0.02},
		},
		{
			name: "a second change on the way is timed from the first",
			steps: []step{
				{0, arrived}, {time.Second, applied(true)}, {time.Second, arrived},
				{time.Second, applied(true)}, {time.Second, reported(3500 * time.Millisecond)},
			},
			intent: []float64{1, 3}, status: []float64{4},
		},
		{
			name:  "nothing arrived: nothing is timed",
			steps: []step{{0, applied(true)}, {0, reported(0)}},
		},
		{
			name: "a change never carried through does not lend its age to the next",
			steps: []step{
				{0, arrived}, {time.Hour + 2*time.Minute, arrived}, {time.Second, applied(false)},
			},
			intent: []float64{1},
		},
		{
			name:   "repeats are timed once",
			steps:  []step{{0, arrived}, {time.Second, applied(true)}, {time.Second, applied(true)}, {time.Second, reported(2 * time.Second)}, {time.Second, reported(3 * time.Second)}},
			intent: []float64{1}, status: []float64{3},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			reg := prometheus.NewRegistry()
			l := NewSyncLag(reg)
			start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
			now := start
			l.now = func() time.Time { return now }

			for _, s := range tc.steps {
				now = now.Add(s.after)
				s.do(l, start)
			}

			got := map[string][]float64{}

			families, err := reg.Gather()
			require.NoError(t, err)
			require.Len(t, families, 1)
			require.Len(t, families[0].GetMetric(), 2, "both steps exist from the start")

			for _, m := range families[0].GetMetric() {
				h := m.GetHistogram()
				if h.GetSampleCount() > 0 {
					got[m.GetLabel()[0].GetValue()] = []float64{float64(h.GetSampleCount()), h.GetSampleSum()}
				}
			}

			check := func(step string, want []float64) {
				if len(want) == 0 {
					assert.NotContains(t, got, step)

					return
				}

				sum := 0.0
				for _, w := range want {
					sum += w
				}

				require.Contains(t, got, step)
				assert.InDelta(t, float64(len(want)), got[step][0], 0, step)
				assert.InDelta(t, sum, got[step][1], 1e-9, step)
			}

			check(StepIntent, tc.intent)
			check(StepStatus, tc.status)
		})
	}

	var none *SyncLag

	none.Arrived(id)
	none.Applied(id, true)
	none.Reported(id, time.Now())
}
