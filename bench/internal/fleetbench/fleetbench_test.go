package fleetbench

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestLatencyOf(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name          string
		in            []time.Duration
		p50, p99, max time.Duration
	}{
		{"none", nil, 0, 0, 0},
		{"one", []time.Duration{3}, 3, 3, 3},
		{"hundred", func() []time.Duration {
			var ds []time.Duration
			for i := 100; i >= 1; i-- {
				ds = append(ds, time.Duration(i))
			}

			return ds
		}(), 51, 100, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			l := latencyOf(tc.in)
			require.Equal(t, len(tc.in), l.N)
			require.Equal(t, tc.p50, l.P50)
			require.Equal(t, tc.p99, l.P99)
			require.Equal(t, tc.max, l.Max)
		})
	}
}

func TestFleetEvents(t *testing.T) {
	t.Parallel()

	fe := newFleetEvents()
	fe.read(strings.NewReader(strings.Join([]string{
		`{"time":"2026-01-01T00:00:00Z","event":"listening","address":"127.0.0.1:1"}`,
		`not json`,
		`{"time":"2026-01-01T00:00:01Z","event":"registered","machine":"m","index":3,"boot":1,"session":1}`,
		`{"time":"2026-01-01T00:00:02Z","event":"order-received","machine":"m","index":3,"order":"wipe-a","kind":"wipe","wipe":"a"}`,
		`{"time":"2026-01-01T00:00:03Z","event":"order-received","machine":"m","index":3,"order":"wipe-a","kind":"wipe","wipe":"a"}`,
		`{"time":"2026-01-01T00:00:02Z","event":"order-started","machine":"m","index":3,"order":"wipe-a","kind":"wipe","wipe":"a"}`,
		`{"time":"2026-01-01T00:00:04Z","event":"order-done","machine":"m","index":3,"order":"wipe-a","kind":"wipe","wipe":"a","status":"done","disks":4}`,
		`{"time":"2026-01-01T00:00:05Z","event":"registered","machine":"m","index":3,"boot":1,"session":2}`,
	}, "\n")))

	require.Equal(t, "127.0.0.1:1", fe.listenAddress())
	require.Equal(t, 1, fe.bad)

	fe.view(func(ms map[string]*simMachine) {
		m := ms["m"]
		require.NotNil(t, m)
		require.Equal(t, 3, m.Index)
		require.Len(t, m.Registrations, 2)
		require.Equal(t, 2, m.Received["wipe-a"].Second(), "the first arrival counts")
		require.Equal(t, 1, m.Started["a"])
		require.Equal(t, 4, m.Disks["a"])
		require.True(t, wipedAfter(m, m.Registrations[0]))
		require.True(t, receivedAfter(m, m.Registrations[0], "wipe-"))
		require.False(t, receivedAfter(m, m.Registrations[1], "wipe-"))
	})
}
