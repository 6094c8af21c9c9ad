package labtest_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/hack/internal/labtest"
)

func TestLogMark(t *testing.T) {
	t.Parallel()

	path := filepath.Join(t.TempDir(), "provider.log")
	require.NoError(t, os.WriteFile(path, []byte(`{"level":"info","ts":"2026-12-07T06:00:00.000Z","logger":"replica","msg":"elected leader"}`+"\n"), 0o644))

	mark := labtest.MarkLog(path)

	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)

	_, err = f.WriteString(`panic: not JSON
{"level":"warn","ts":"2026-12-07T06:00:01.250+0000","logger":"replica","msg":"leadership ended","error":"the election session ended"}
{"level":"info","ts":"2026-12-07T06:00:02.500Z","logger":"replica","msg":"elected leader","key":"k"}
{"level":"info","ts":"2026-12-07T06:00:03.0`)
	require.NoError(t, err)
	require.NoError(t, f.Close())

	lines := mark.Lines()
	require.Len(t, lines, 2)
	assert.Equal(t, "the election session ended", lines[0].Error)
	assert.Equal(t, time.Date(2026, 12, 7, 6, 0, 1, 250e6, time.UTC), lines[0].At.UTC())

	l, ok := mark.First("elected leader")
	require.True(t, ok)
	assert.Equal(t, time.Date(2026, 12, 7, 6, 0, 2, 500e6, time.UTC), l.At.UTC())
	assert.Len(t, mark.All("elected leader"), 1)
	assert.Len(t, labtest.MarkLog(filepath.Join(t.TempDir(), "none")).Lines(), 0)
}
