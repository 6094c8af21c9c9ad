package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// haltCase names the case of haltCases the test binary runs instead of its tests.
const haltCase = "TALOS_PREINIT_HALT_CASE"

// haltCases are ways for PID 1 to end: halt, which must keep the process alive, and
// select {} alone, which Go's runtime takes for a deadlock and exits (the kernel would
// then panic).
var haltCases = []struct {
	name  string
	halt  func()
	alive bool
}{
	{name: "halt", halt: halt, alive: true},
	{name: "select", halt: func() { select {} }, alive: false},
}

// TestMain runs a halt case when asked to, before the testing package starts the
// goroutines and timers that would keep the runtime from seeing a deadlock.
func TestMain(m *testing.M) {
	if name := os.Getenv(haltCase); name != "" {
		for _, tc := range haltCases {
			if tc.name == name {
				tc.halt()
			}
		}

		os.Exit(3)
	}

	os.Exit(m.Run())
}

// TestHalt: what PID 1 ends in once Talos' init could not be run keeps the process
// alive. Each case runs in this package's test binary built again as the preinit is
// built, static (CGO_ENABLED=0): a binary linked with cgo, as the race detector's (make
// unit) is, keeps a thread the runtime counts as running, so it sees no deadlock and
// select {} would live on too.
func TestHalt(t *testing.T) {
	t.Parallel()

	bin := filepath.Join(t.TempDir(), "talos-preinit.test")
	build := exec.CommandContext(t.Context(), "go", "test", "-c", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")

	out, err := build.CombinedOutput()
	require.NoError(t, err, "building the static test binary: %s", out)

	for _, tc := range haltCases {
		cmd := exec.CommandContext(t.Context(), bin)
		cmd.Env = append(os.Environ(), haltCase+"="+tc.name)
		require.NoError(t, cmd.Start())

		exited := make(chan error, 1)

		go func() { exited <- cmd.Wait() }()

		alive := false

		select {
		case err := <-exited:
			t.Logf("%s: the process exited: %v", tc.name, err)
		case <-time.After(2 * time.Second):
			alive = true

			require.NoError(t, cmd.Process.Kill())

			assert.Error(t, <-exited, "%s: killed", tc.name)
		}

		assert.Equal(t, tc.alive, alive, tc.name)
	}
}
