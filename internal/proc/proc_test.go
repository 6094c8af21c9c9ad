package proc

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pidFrom waits for a shell to write a pid to path and returns it.
func pidFrom(t *testing.T, path string) int {
	t.Helper()

	var pid int

	require.Eventually(t, func() bool {
		b, err := os.ReadFile(path)
		if err != nil || !strings.HasSuffix(string(b), "\n") {
			return false
		}

		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))

		return err == nil
	}, 10*time.Second, 10*time.Millisecond, "no pid in %s", path)

	return pid
}

// killOnCleanup kills pid when the test ends, should an assertion have left it.
func killOnCleanup(t *testing.T, pid int) {
	t.Cleanup(func() {
		if Alive(pid) {
			_ = Stop(context.Background(), pid, 0)
		}
	})
}

func TestAlive(t *testing.T) {
	t.Parallel()

	assert.True(t, Alive(os.Getpid()))
	assert.False(t, Alive(0))
	assert.False(t, Alive(-1))

	// An exited child that nobody reaped yet is a zombie: not alive.
	cmd := exec.Command("true")
	require.NoError(t, cmd.Start())

	require.Eventually(t, func() bool {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/stat")
		state, ok := statState(b)

		return err == nil && ok && state == 'Z'
	}, 10*time.Second, 10*time.Millisecond)
	assert.False(t, Alive(cmd.Process.Pid))
	require.NoError(t, cmd.Wait())
}

func TestStatState(t *testing.T) {
	t.Parallel()

	for stat, want := range map[string]byte{
		"42 (sleep) S 1 42":        'S',
		"42 (a) b) (c) Z 1 42":     'Z',
		"42 (with space) R 1 42 0": 'R',
	} {
		got, ok := statState([]byte(stat))
		assert.True(t, ok, stat)
		assert.Equal(t, string(want), string(got), stat)
	}

	for _, bad := range []string{"", "42 (sleep", "42 (sleep)"} {
		_, ok := statState([]byte(bad))
		assert.False(t, ok, bad)
	}
}

func TestChildStopEndsItsGroup(t *testing.T) {
	t.Parallel()

	dir := t.TempDir()
	bg := filepath.Join(dir, "bg.pid")

	// The shell starts a process of its own, which stays in the child's group.
	c, err := Start("sh", exec.Command("sh", "-c", "sleep 300 & echo $! > "+bg+"; sleep 300; :"), filepath.Join(dir, "log"))
	require.NoError(t, err)

	killOnCleanup(t, c.Pid())

	started := pidFrom(t, bg)
	killOnCleanup(t, started)

	exited, err := c.Exited()
	assert.False(t, exited)
	require.NoError(t, err)
	assert.Equal(t, "sh", c.Name())

	c.Stop(5 * time.Second)

	exited, err = c.Exited()
	assert.True(t, exited)
	require.Error(t, err, "ended by a signal")
	assert.True(t, WaitGone(t.Context(), started, 5*time.Second), "what the child started is gone too")

	c.Stop(time.Second) // again: nothing to do
}

func TestChildStopAfterTheLeaderExited(t *testing.T) {
	t.Parallel()

	dir := t.TempDir()
	bg := filepath.Join(dir, "bg.pid")

	c, err := Start("sh", exec.Command("sh", "-c", "sleep 300 & echo $! > "+bg), filepath.Join(dir, "log"))
	require.NoError(t, err)

	started := pidFrom(t, bg)
	killOnCleanup(t, started)

	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the shell did not exit")
	}

	require.True(t, Alive(started), "the shell's own child outlives it")

	c.Stop(5 * time.Second)
	assert.True(t, WaitGone(t.Context(), started, 5*time.Second), "Stop ends the group, leader or not")
}

func TestChildStopKillsWhatIgnoresTERM(t *testing.T) {
	t.Parallel()

	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")

	c, err := Start("sh", exec.Command("sh", "-c", "trap '' TERM; echo $$ > "+ready+"; while :; do sleep 1; done"), filepath.Join(dir, "log"))
	require.NoError(t, err)

	killOnCleanup(t, c.Pid())
	pidFrom(t, ready)

	start := time.Now()

	c.Stop(200 * time.Millisecond)

	assert.Less(t, time.Since(start), 5*time.Second)
	assert.False(t, Alive(c.Pid()))
}

func TestChildLog(t *testing.T) {
	t.Parallel()

	log := filepath.Join(t.TempDir(), "log")

	cmd := exec.Command("sh", "-c", "echo out; echo err >&2")
	cmd.Env = append(os.Environ(), "X=1")

	c, err := Start("echo", cmd, log)
	require.NoError(t, err)

	<-c.Done()
	c.Stop(time.Second)

	b, err := os.ReadFile(log)
	require.NoError(t, err)
	assert.Equal(t, "out\nerr\n", string(b))

	_, err = Start("missing", exec.Command(filepath.Join(t.TempDir(), "no-such-program")), filepath.Join(t.TempDir(), "log"))
	require.ErrorContains(t, err, "error starting missing")

	_, err = Start("nolog", exec.Command("true"), filepath.Join(t.TempDir(), "no", "dir", "log"))
	require.ErrorContains(t, err, "error creating the log of nolog")
}

func TestChildWaitTCP(t *testing.T) {
	t.Parallel()

	dir := t.TempDir()

	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)

	t.Cleanup(func() { l.Close() })

	c, err := Start("sleep", exec.Command("sleep", "300"), filepath.Join(dir, "sleep.log"))
	require.NoError(t, err)
	t.Cleanup(func() { c.Stop(time.Second) })

	require.NoError(t, c.WaitTCP(t.Context(), l.Addr().String(), 10*time.Second))

	// Nothing listens there: the wait ends with its timeout.
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)

	addr := closed.Addr().String()
	require.NoError(t, closed.Close())
	assert.ErrorContains(t, c.WaitTCP(t.Context(), addr, 300*time.Millisecond), "did not listen")

	// A child that exits is reported at once.
	gone, err := Start("false", exec.Command("false"), filepath.Join(dir, "false.log"))
	require.NoError(t, err)
	t.Cleanup(func() { gone.Stop(time.Second) })

	assert.ErrorContains(t, gone.WaitTCP(t.Context(), addr, time.Minute), "false exited before listening")
}

func TestRun(t *testing.T) {
	t.Parallel()

	out, err := Run(t.Context(), "sh", "-c", "echo hello; echo there >&2")
	require.NoError(t, err)
	assert.Equal(t, "hello\nthere\n", out)

	out, err = Run(t.Context(), "sh", "-c", "echo why; exit 3")
	require.Error(t, err)
	assert.Equal(t, "why\n", out)
	assert.Contains(t, err.Error(), "why", "the error says what the command said")
	assert.Equal(t, 3, ExitCode(err))
	assert.Equal(t, -1, ExitCode(context.Canceled))

	_, err = Run(t.Context())
	assert.Error(t, err)
}

func TestRunKillsItsGroupWhenCanceled(t *testing.T) {
	t.Parallel()

	bg := filepath.Join(t.TempDir(), "bg.pid")

	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()

	start := time.Now()

	_, err := Run(ctx, "sh", "-c", "sleep 300 & echo $! > "+bg+"; wait")
	require.Error(t, err)
	assert.Less(t, time.Since(start), 5*time.Second)

	started := pidFrom(t, bg)
	killOnCleanup(t, started)
	assert.True(t, WaitGone(t.Context(), started, 5*time.Second), "what the command started is killed with it")
}

func TestStartDaemonAndStop(t *testing.T) {
	t.Parallel()

	log := filepath.Join(t.TempDir(), "daemon.log")
	require.NoError(t, os.WriteFile(log, []byte("earlier run\n"), 0o644))

	pid, err := StartDaemon(exec.Command("sh", "-c", "echo started; exec sleep 300"), log)
	require.NoError(t, err)
	killOnCleanup(t, pid)

	sid, err := sessionOf(pid)
	require.NoError(t, err)
	assert.Equal(t, pid, sid, "the daemon leads a session of its own")

	require.Eventually(t, func() bool {
		b, err := os.ReadFile(log)

		return err == nil && string(b) == "earlier run\nstarted\n"
	}, 10*time.Second, 10*time.Millisecond, "the log is appended to")

	require.NoError(t, Stop(t.Context(), pid, 5*time.Second))
	assert.False(t, Alive(pid))
	require.NoError(t, Stop(t.Context(), pid, time.Second), "a stopped pid is stopped")

	_, err = StartDaemon(exec.Command("true"), filepath.Join(t.TempDir(), "no", "log"))
	assert.Error(t, err)
}

// sessionOf reads pid's session ID, field 6 of its stat.
func sessionOf(pid int) (int, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}

	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])

	return strconv.Atoi(fields[3])
}

func TestStopEscalates(t *testing.T) {
	t.Parallel()

	ready := filepath.Join(t.TempDir(), "ready")

	pid, err := StartDaemon(exec.Command("sh", "-c", "trap '' TERM; echo $$ > "+ready+"; while :; do sleep 1; done"), filepath.Join(t.TempDir(), "log"))
	require.NoError(t, err)
	killOnCleanup(t, pid)
	pidFrom(t, ready)

	require.NoError(t, Stop(t.Context(), pid, 200*time.Millisecond))
	assert.False(t, Alive(pid))
}

func TestFindByArg(t *testing.T) {
	t.Parallel()

	marker := filepath.Join(t.TempDir(), "lab") + "/"

	// "; :" keeps the shell from exec'ing sleep: the shell itself carries the marker.
	c, err := Start("sh", exec.Command("sh", "-c", "sleep 300; :", marker+"x"), filepath.Join(t.TempDir(), "log"))
	require.NoError(t, err)
	t.Cleanup(func() { c.Stop(time.Second) })

	require.Eventually(t, func() bool { return len(FindByArg(marker, "sh", "da*")) == 1 }, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, []int{c.Pid()}, FindByArg(marker, "sh", "da*"))
	assert.Empty(t, FindByArg(marker, "qemu-system-*"), "only the programs asked for")
	assert.Empty(t, FindByArg(marker+"other", "sh"))

	c.Stop(time.Second)
	assert.Empty(t, FindByArg(marker, "sh"))
}

func TestMatchCmdline(t *testing.T) {
	t.Parallel()

	programs := []string{"qemu-system-*", "dnsmasq"}

	for _, tc := range []struct {
		cmdline string
		want    bool
	}{
		{"/usr/bin/qemu-system-x86_64\x00-name\x00/lab/m/x\x00", true},
		{"dnsmasq\x00--conf=/lab/dnsmasq.conf\x00", true},
		{"/usr/bin/grep\x00/lab/\x00", false},
		{"/usr/bin/qemu-system-x86_64\x00-name\x00other\x00", false},
		{"/lab/dnsmasq\x00", false},
		{"", false},
	} {
		assert.Equal(t, tc.want, matchCmdline([]byte(tc.cmdline), "/lab/", programs), "%q", tc.cmdline)
	}
}

func TestPinned(t *testing.T) {
	t.Parallel()

	assert.Equal(t, []string{"taskset", "-c", "1", "nginx", "-p", "x"}, Pinned(1, "nginx", "-p", "x"))
	assert.Equal(t, []string{"nginx"}, Pinned(-1, "nginx"))
}

func TestStats(t *testing.T) {
	t.Parallel()

	rss, err := RSSBytes(os.Getpid())
	require.NoError(t, err)
	assert.Positive(t, rss)

	_, err = CPUTime(os.Getpid())
	require.NoError(t, err)

	_, err = RSSBytes(0)
	require.Error(t, err)

	got, err := parseRSS([]byte("Name:\tx\nVmRSS:\t    1024 kB\n"))
	require.NoError(t, err)
	assert.Equal(t, int64(1<<20), got)

	_, err = parseRSS([]byte("Name:\tkthreadd\n"))
	require.Error(t, err, "kernel threads have no VmRSS")

	_, err = parseRSS([]byte("VmRSS:\tlots kB\n"))
	require.Error(t, err)

	d, err := parseCPUTime([]byte("7 (a (b) c) S 1 7 7 0 -1 4194560 100 0 0 0 150 50 0 0 20 0 1 0 5 0"))
	require.NoError(t, err)
	assert.Equal(t, 2*time.Second, d, "150 + 50 ticks of 10 ms")

	for _, bad := range []string{"7 (x) S 1", "no name", "7 (x) S 1 7 7 0 -1 0 0 0 0 0 x 50 0"} {
		_, err = parseCPUTime([]byte(bad))
		assert.Error(t, err, bad)
	}
}
