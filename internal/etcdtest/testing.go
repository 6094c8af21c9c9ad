package etcdtest

import (
	"bytes"
	"os"
	"testing"
)

// tailLines is how much of each member's log a failed test shows.
const tailLines = 40

// New starts the cluster for t, in t.TempDir() unless cfg.Dir is set, and stops it when t
// ends, pass or fail, checking that no member's process is left. It skips t, saying so,
// when the etcd binary is not built (make envtest-assets builds it; make lab does first).
// Should t fail, the end of each member's log is shown.
func New(t testing.TB, cfg Config) *Cluster {
	t.Helper()

	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}

	cfg.Binary = Binary(cfg.Binary)

	if _, err := os.Stat(cfg.Binary); err != nil {
		t.Skipf("no etcd at %s (make envtest-assets builds it; $ANVIL_ETCD_BIN names another): %v", cfg.Binary, err)
	}

	c, err := Start(t.Context(), cfg)
	if err != nil {
		logTails(t, cfg)
		t.Fatalf("error starting etcd: %v", err)
	}

	t.Cleanup(func() {
		if t.Failed() {
			logTails(t, cfg)
		}

		if err := c.Stop(); err != nil {
			t.Error(err)
		}
	})

	return c
}

// logTails shows the end of each member's log.
func logTails(t testing.TB, cfg Config) {
	t.Helper()

	n := cfg.Members
	if n == 0 {
		n = 3
	}

	for i := range n {
		path := logPath(cfg.Dir, i)

		b, err := os.ReadFile(path)
		if err != nil {
			t.Logf("%s: %v", path, err)

			continue
		}

		t.Logf("the end of %s:\n%s", path, tail(b, tailLines))
	}
}

// tail is the last n lines of b.
func tail(b []byte, n int) []byte {
	b = bytes.TrimRight(b, "\n")

	i := len(b)
	for range n {
		j := bytes.LastIndexByte(b[:i], '\n')
		if j < 0 {
			return b
		}

		i = j
	}

	return b[i+1:]
}
