package lab

import (
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestStopProvider(t *testing.T) {
	t.Parallel()

	s := &State{Dir: t.TempDir()}

	// A stand-in provider: its command line names the lab provider's state directory.
	// A loop, not one command, which a shell may exec in its place.
	cmd := exec.Command("sh", "-c", "while :; do sleep 0.2; done", "provider", "--state-dir", s.ProviderStateDir())
	require.NoError(t, cmd.Start())

	done := make(chan error, 1)

	go func() { done <- cmd.Wait() }()

	t.Cleanup(func() { _ = cmd.Process.Kill() })

	assert.False(t, s.isProvider(os.Getpid()), "a process that is not the lab's provider")
	assert.False(t, s.isProvider(0))
	// Start returns once the child's exec is under way, which is before the kernel has
	// set up its new arguments: /proc/<pid>/cmdline reads empty for a moment (seen in a
	// loaded make test).
	require.Eventually(t, func() bool { return s.isProvider(cmd.Process.Pid) }, 10*time.Second, 10*time.Millisecond)

	s.ProviderPID = os.Getpid()
	require.NoError(t, s.stopProvider(t.Context(), true), "not the provider: left alone")

	s.ProviderPID = cmd.Process.Pid
	require.NoError(t, s.stopProvider(t.Context(), false))
	assert.Error(t, <-done, "stopped by a signal")
}

func TestRelaunchProviderRefuses(t *testing.T) {
	t.Parallel()

	s := &State{Dir: t.TempDir(), ProviderNS: "anvnone-lab"}
	assert.ErrorContains(t, s.RelaunchProvider(t.Context(), false), "recorded no provider command line")

	s.ProviderCommand = []string{"/bin/provider", "--state-dir", s.ProviderStateDir()}
	assert.ErrorContains(t, s.RelaunchProvider(t.Context(), false), "is not up (no namespace anvnone-lab)")
}
