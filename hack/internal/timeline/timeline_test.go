package timeline_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/hack/internal/timeline"
)

func appendFile(t *testing.T, path, s string) {
	t.Helper()

	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	require.NoError(t, err)
	_, err = f.WriteString(s)
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

// A line is stamped when its end is seen: a half-written line waits for the rest, and
// logs that appear after Follow started are followed too.
func TestConsoles(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()

	c := timeline.Follow(ctx, filepath.Join(dir, "*", "serial.log"), time.Hour) // polled by First only
	serial := filepath.Join(dir, "m0", "serial.log")
	require.NoError(t, os.Mkdir(filepath.Dir(serial), 0o755))

	start := time.Now()

	appendFile(t, serial, "SeaBIOS\r\nConfiguring (net0 52:54:00:00:00:01)...")

	_, ok := c.First(serial, start, timeline.Any(")... ok"))
	assert.False(t, ok, "the line is not finished")

	time.Sleep(20 * time.Millisecond)
	mid := time.Now()
	appendFile(t, serial, " ok\nnet0: 10.77.0.100/24\n")

	l, ok := c.First(serial, start, timeline.Any(")... ok"))
	require.True(t, ok)
	assert.Equal(t, "Configuring (net0 52:54:00:00:00:01)... ok", l.Text)
	assert.False(t, l.At.Before(mid), "stamped when its end appeared")

	_, ok = c.First(serial, time.Now().Add(time.Second), timeline.Any("net0"))
	assert.False(t, ok, "nothing seen after since")

	_, ok = c.First(serial, start, timeline.All("net0", "missing"))
	assert.False(t, ok)
}

const providerLog = `{"level":"info","ts":"2026-11-30T03:13:10.597Z","msg":"boot","machine":"m-1","decision":"agent"}
not json: a panic trace line
{"level":"info","ts":"2026-11-30T03:13:10.700Z","msg":"boot","machine":"m-2","decision":"agent"}
{"level":"info","ts":"bad time","msg":"boot","machine":"m-1","decision":"talos"}
{"level":"info","ts":"2026-11-30T03:13:20.012Z","msg":"machine inventory","machine":"m-1"}
{"level":"info","ts":"2026-11-30T03:14:30.100Z","msg":"boot","machine":"m-1","decision":"talos"}
`

func TestProviderLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "provider.log")
	require.NoError(t, os.WriteFile(path, []byte(providerLog), 0o644))

	entries, err := timeline.ReadProviderLog(path)
	require.NoError(t, err)
	assert.Len(t, entries, 4, "the non-JSON line and the bad timestamp are skipped")

	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339Nano, s)
		require.NoError(t, err)

		return v
	}

	for _, tc := range []struct {
		name, machine, msg string
		since              time.Time
		match              map[string]string
		want               string // ts, "" for none
	}{
		{"first boot", "m-1", "boot", at("2026-11-30T03:13:00Z"), nil, "2026-11-30T03:13:10.597Z"},
		{"by field", "m-1", "boot", at("2026-11-30T03:13:00Z"), map[string]string{"decision": "talos"}, "2026-11-30T03:14:30.1Z"},
		{"since", "m-1", "boot", at("2026-11-30T03:13:11Z"), nil, "2026-11-30T03:14:30.1Z"},
		{"other machine", "m-2", "machine inventory", at("2026-11-30T03:13:00Z"), nil, ""},
		{"field mismatch", "m-2", "boot", at("2026-11-30T03:13:00Z"), map[string]string{"decision": "talos"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, ok := timeline.FirstEntry(entries, tc.since, tc.machine, tc.msg, tc.match)
			if tc.want == "" {
				assert.False(t, ok)

				return
			}

			require.True(t, ok)
			assert.True(t, at(tc.want).Equal(e.At), "%s", e.At)
		})
	}

	_, err = timeline.ReadProviderLog(filepath.Join(t.TempDir(), "missing.log"))
	assert.Error(t, err)
}

func TestMedianAndTable(t *testing.T) {
	s := func(d ...time.Duration) timeline.Stages {
		out := timeline.Stages{}
		for i, v := range d {
			out[timeline.AgentStages[i]] = v
		}

		return out
	}

	med, n := timeline.Median([]timeline.Stages{
		s(3*time.Second, 4*time.Second),
		s(1 * time.Second),
		s(2*time.Second, 8*time.Second),
	})
	assert.Equal(t, 2*time.Second, med[timeline.StageDHCP])
	assert.Equal(t, 3, n[timeline.StageDHCP])
	assert.Equal(t, 4*time.Second, med[timeline.StageScript], "the lower middle of two")
	assert.Equal(t, 2, n[timeline.StageScript])

	table := timeline.Table("t", []string{"bios-0 (bios)"}, map[string]timeline.Stages{"bios-0 (bios)": med}, timeline.AgentStages)
	lines := strings.Split(strings.TrimSpace(table), "\n")
	require.Len(t, lines, 3)
	assert.Contains(t, lines[1], "dhcp")
	assert.Contains(t, lines[2], "2.0s")
	assert.Contains(t, lines[2], "4.0s")
	assert.Contains(t, lines[2], "-", "stages not seen")
}
