package initsys

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

func TestParseMountinfo(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name, in string
		want     []string
	}{
		{
			name: "typical",
			in: `22 28 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:13 - proc proc rw
23 28 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:2 - sysfs sysfs rw
25 22 0:23 / /sys/firmware/efi/efivars rw,nosuid,nodev,noexec,relatime shared:3 - efivarfs efivarfs rw
`,
			want: []string{"/proc", "/sys", "/sys/firmware/efi/efivars"},
		},
		{
			name: "octal escapes",
			in:   `40 28 0:40 / /tmp/with\040space rw - tmpfs tmpfs rw` + "\n" + `41 28 0:41 / /tmp/back\134slash rw - tmpfs tmpfs rw`,
			want: []string{"/tmp/with space", `/tmp/back\slash`},
		},
		{
			name: "malformed lines skipped",
			in:   "garbage\n\n1 2 3\n50 28 0:50 / /run rw - tmpfs tmpfs rw\n",
			want: []string{"/run"},
		},
		{name: "empty", in: "", want: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			got, err := parseMountinfo(strings.NewReader(tc.in))
			require.NoError(t, err)

			var keys []string
			for k := range got {
				keys = append(keys, k)
			}

			assert.ElementsMatch(t, tc.want, keys)
		})
	}
}

func TestMountAllSkipsMounted(t *testing.T) {
	t.Parallel()

	// Nothing may be mounted for real, and every target counts as done.
	root := mountedRoot(t)

	require.NoError(t, MountAll(zap.NewNop(), root, Mounts))

	for _, m := range Mounts[1:] {
		assert.NoDirExists(t, filepath.Join(root, m.Target), "nothing should be created for a mounted target")
	}
}

func TestMountAllConditional(t *testing.T) {
	t.Parallel()

	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "proc/self"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "proc/self/mountinfo"), nil, 0o644))

	// No /sys/firmware/efi under root: the efivarfs mount is not tried.
	require.NoError(t, MountAll(zap.NewNop(), root, Mounts[len(Mounts)-1:]))
	assert.NoDirExists(t, filepath.Join(root, "sys/firmware/efi/efivars"))
}

var lineRE = regexp.MustCompile(`^\[ *\d+\.\d{3}\] (INFO |WARN |ERROR|DEBUG) (\S+ )?.+$`)

func TestLoggerFormat(t *testing.T) {
	t.Parallel()

	var a, b bytes.Buffer

	log := NewLogger(zapcore.InfoLevel, &a, &b)
	log.Named("modules").Info("loaded kernel module", zap.String("module", "virtio_net"), zap.Duration("took", 1500*time.Microsecond))
	log.Warn("no lease", zap.Error(errors.New("timeout")))
	log.Debug("not shown")
	require.NoError(t, log.Sync())

	assert.Equal(t, a.String(), b.String(), "every writer gets every line")

	lines := strings.Split(strings.TrimSuffix(a.String(), "\n"), "\n")
	require.Len(t, lines, 2, a.String())

	for _, l := range lines {
		assert.Regexp(t, lineRE, l)
	}

	assert.Contains(t, lines[0], `INFO  modules loaded kernel module {"module": "virtio_net", "took": "1.5ms"}`)
	assert.Contains(t, lines[1], `WARN  no lease {"error": "timeout"}`)
}

func TestSinceBoot(t *testing.T) {
	t.Parallel()

	boot := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

	for d, want := range map[time.Duration]string{
		0: "[    0.000]",
		12*time.Second + 345*time.Millisecond + 999*time.Microsecond: "[   12.345]",
		123456 * time.Second: "[123456.000]",
		-time.Second:         "[    0.000]",
	} {
		assert.Equal(t, want, sinceBoot(boot, boot.Add(d)))
	}

	// bootTime puts "now" at the kernel's uptime, well after boot.
	up := time.Since(bootTime())
	assert.Greater(t, up, time.Duration(0))
}

func TestGuard(t *testing.T) {
	t.Parallel()

	sentinel := errors.New("sentinel")

	for _, tc := range []struct {
		name      string
		fn        func() error
		wantErr   error
		wantPanic bool
	}{
		{name: "ok", fn: func() error { return nil }},
		{name: "error passes through", fn: func() error { return sentinel }, wantErr: sentinel},
		{name: "panic string", fn: func() error { panic("boom") }, wantPanic: true},
		{name: "panic error", fn: func() error { panic(sentinel) }, wantErr: sentinel, wantPanic: true},
		{name: "nil map write", fn: func() error {
			var m map[string]int
			m["x"] = 1 //nolint:staticcheck // SA5000: the panic under test

			return nil
		}, wantPanic: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			var buf bytes.Buffer

			err := Guard(NewLogger(zapcore.DebugLevel, &buf), tc.fn)

			if tc.wantErr != nil {
				assert.ErrorIs(t, err, tc.wantErr)
			}

			if !tc.wantPanic {
				if tc.wantErr == nil {
					assert.NoError(t, err)
				}

				assert.Empty(t, buf.String())

				return
			}

			var pe *PanicError
			require.ErrorAs(t, err, &pe)
			assert.Contains(t, string(pe.Stack), "initsys.TestGuard")
			assert.Contains(t, buf.String(), "ERROR recovered from panic")
			// The stack is logged as lines, not one escaped string.
			assert.Contains(t, buf.String(), "\ngoroutine ")
			assert.Contains(t, buf.String(), "initsys_test.go:")
		})
	}

	assert.Error(t, Guard(nil, func() error { panic("no logger") }))
}

func TestReaper(t *testing.T) {
	// Not parallel: the reaper waits for any child of the test process.
	ctx, cancel := context.WithCancel(context.Background())

	r := NewReaper(zap.NewNop())

	var wg sync.WaitGroup
	wg.Go(func() { r.Reap(ctx) })

	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})

	// Started and never waited for: without the reaper it stays a zombie.
	var pids []int

	for range 3 {
		cmd := exec.Command("true")
		require.NoError(t, cmd.Start())

		pids = append(pids, cmd.Process.Pid)
	}

	for _, pid := range pids {
		require.Eventually(t, func() bool {
			_, err := os.Stat("/proc/" + strconv.Itoa(pid))

			return errors.Is(err, os.ErrNotExist)
		}, 5*time.Second, 10*time.Millisecond, "pid %d was not reaped", pid)
	}

	// Children run through Run keep their exit status.
	for range 5 {
		require.NoError(t, r.Run(exec.Command("true")))

		var ee *exec.ExitError
		require.ErrorAs(t, r.Run(exec.Command("false")), &ee)
		assert.Equal(t, 1, ee.ExitCode())
	}

	// The reaper stops with its context.
	cancel()

	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()

	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("reaper did not stop")
	}
}

func TestIsPID1(t *testing.T) {
	t.Parallel()

	assert.False(t, IsPID1(), "tests do not run as init")
}
