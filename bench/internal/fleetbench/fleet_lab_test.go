//go:build lab

package fleetbench_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/bench/internal/fleetbench"
)

// TestLabFleetNothingLost runs 200 simulated agents through registration, auto-accept and
// wipe, allocation, installation and deallocation (the reset wipe), the provider SIGKILLed
// in the middle of the reset wipes and restarted on its state: nothing may be lost.
func TestLabFleetNothingLost(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..", "..")
	bin := t.TempDir()

	for out, pkg := range map[string]string{"provider": "./provider/cmd/provider", "fleetsim": "./agent/cmd/fleetsim"} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(bin, out), pkg)
		cmd.Dir = root

		b, err := cmd.CombinedOutput()
		require.NoError(t, err, "building %s: %s", pkg, b)
	}

	work := t.TempDir()

	res, err := fleetbench.Run(t.Context(), fleetbench.Config{
		ProviderBin: filepath.Join(bin, "provider"), FleetsimBin: filepath.Join(bin, "fleetsim"), WorkDir: work,
		Machines: 200, Allocate: 40, WipeFast: 3 * time.Second, Phase: 90 * time.Second, TalosVersion: "v1.10.0",
		Log: t.Logf,
	})
	if err != nil || t.Failed() {
		dumpLogs(t, work)
	}

	require.NoError(t, err)

	t.Logf("registered in %s, accepted and wiped in %s; allocate -> order p50 %s p99 %s; deallocate -> reset wipe p99 %s; restart -> %d sessions back in %s; provider CPU %s, peak RSS %.1f MB, state %.1f MB",
		res.RegisterTook, res.AcceptWipeTook, res.AllocOrder.P50, res.AllocOrder.P99, res.DeallocWipe.P99,
		res.SessionsAtKill, res.RestartBack, res.CPU, float64(res.PeakRSS)/1e6, float64(res.StateBytes)/1e6)

	require.Empty(t, res.Problems)
	require.Zero(t, res.Lost, "machines lost")
	require.Zero(t, res.ReportsLost, "erase reports lost")
	require.Zero(t, res.NotResent, "owed reset wipes not re-sent")
	require.Zero(t, res.WipesTwice, "wipes carried out twice")
	require.Zero(t, res.NotAccepted, "machines never accepted and wiped")
	require.Equal(t, 40, res.AllocOrder.N, "every allocation's order reached its agent")
}

func dumpLogs(t *testing.T, dir string) {
	t.Helper()

	for _, name := range []string{"provider-1.log", "provider-2.log", "fleetsim.log"} {
		t.Logf("=== %s (tail)\n%s", name, tail(filepath.Join(dir, name), 60))
	}
}

// tail is the last n lines of the file at path, or why there are none.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}

	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")

	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
