//go:build lab

package stormbench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/internal/netns"
)

// clientEnv makes the test binary the storm client (run in the client namespace).
const clientEnv = "ANVIL_STORM_CLIENT"

func TestMain(m *testing.M) {
	if os.Getenv(clientEnv) == "1" {
		if err := ClientMain(context.Background(), os.Args[1:]); err != nil {
			fmt.Fprintln(os.Stderr, "storm client:", err)
			os.Exit(1)
		}

		os.Exit(0)
	}

	os.Exit(m.Run())
}

// TestLabStorm200 powers on 200 simulated machines at once against a provider: every
// one gets its lease, the iPXE binary over TFTP, the boot script and the agent's 17 MB
// of kernel and initramfs. Nothing may fail.
func TestLabStorm200(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the storm needs root (network namespaces, ports 67/69)")
	}

	for _, tool := range []string{"ip", "dnsmasq", "taskset"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s", tool)
		}
	}

	dir := t.TempDir()
	provider := buildProvider(t, dir)

	prefix := fmt.Sprintf("anvst%d-", os.Getpid()%100000)

	t.Cleanup(func() {
		namespaces, err := netns.List()
		assert.NoError(t, err)

		for _, ns := range namespaces {
			assert.False(t, strings.HasPrefix(ns, prefix), "namespace %s is left behind", ns)
		}
	})

	work := filepath.Join(dir, "storm")

	t.Cleanup(func() {
		if t.Failed() {
			for _, log := range []string{"anvil.log", "site-dnsmasq.log"} {
				b, err := os.ReadFile(filepath.Join(work, log))
				t.Logf("%s (%v):\n%s", log, err, tail(b, 8000))
			}
		}
	})

	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()

	res, err := Run(ctx, Config{
		ProviderBin: provider,
		ClientArgv:  []string{"env", clientEnv + "=1", os.Args[0]},
		WorkDir:     work,
		Machines:    200, Rounds: 1,
		Timeout:   90 * time.Second,
		ServerCPU: -1, ClientCPU: -1,
		Log: t.Logf,
	})
	require.NoError(t, err)

	s := res.Anvil.Median
	t.Logf("200 machines: all done in %s, %d DHCP retransmissions; p50/p99/max per phase: %s",
		s.Completion.Round(time.Millisecond), s.Retrans, PhaseText(s))

	assert.Zero(t, s.Failures, "failures: %v", s.Errors)
	assert.Equal(t, 200*(res.KernelBytes+res.InitrdBytes), s.HTTPBytes, "every machine got the whole kernel and initramfs")
	assert.Positive(t, s.TFTPBytes)
}

func tail(b []byte, n int) []byte {
	if len(b) <= n {
		return b
	}

	return b[len(b)-n:]
}

// buildProvider builds the provider alone into dir (the storm needs nothing else).
func buildProvider(t *testing.T, dir string) string {
	t.Helper()

	_, file, _, _ := runtime.Caller(0)
	out := filepath.Join(dir, "provider")

	cmd := exec.Command("go", "build", "-o", out, "./provider/cmd/provider")
	cmd.Dir = filepath.Join(filepath.Dir(file), "..", "..", "..")

	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "building the provider: %s", b)

	return out
}
