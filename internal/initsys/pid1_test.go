package initsys

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zapcore"
)

// records keeps each write as one record, as /dev/kmsg does.
type records struct {
	mu   sync.Mutex
	list []string
}

func (r *records) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()

	r.list = append(r.list, string(p))

	return len(p), nil
}

// mountedRoot is a root whose mountinfo says every one of Mounts is mounted, so that
// MountAll mounts nothing for real.
func mountedRoot(t *testing.T) string {
	t.Helper()

	root := t.TempDir()

	var info strings.Builder
	for i, m := range Mounts {
		info.WriteString(strconv.Itoa(i) + " 1 0:1 / " + filepath.Join(root, m.Target) + " rw - tmpfs tmpfs rw\n")
	}

	require.NoError(t, os.MkdirAll(filepath.Join(root, "proc/self"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "proc/self/mountinfo"), []byte(info.String()), 0o644))

	return root
}

// stamp is the time NewLogger puts before each line.
var stamp = regexp.MustCompile(`^\[ *\d+\.\d{3}\] `)

func TestStart(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name        string
		kmsgErr     error
		wantKmsg    []string
		wantConsole []string
	}{
		{
			name: "through the kernel log",
			wantKmsg: []string{
				"<14>INFO  wiping\n",
				"<13>WIPE-REPORT {}\n",
			},
		},
		{
			name:    "on the console where the kernel log would drop lines",
			kmsgErr: errors.New("the kernel log would drop lines (printk.devkmsg=ratelimit)"),
			wantConsole: []string{
				`WARN  logging on the console {"error": "the kernel log would drop lines (printk.devkmsg=ratelimit)"}`,
				"INFO  wiping",
				"WIPE-REPORT {}",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			var (
				console bytes.Buffer
				kmsg    records
			)

			p := start(zapcore.InfoLevel, startEnv{
				root:        mountedRoot(t),
				openConsole: func() (io.Writer, error) { return &console, nil },
				openKmsg: func() (io.Writer, error) {
					if tc.kmsgErr != nil {
						return nil, tc.kmsgErr
					}

					return &kmsg, nil
				},
			})

			p.Logger.Debug("not shown")
			p.Logger.Info("wiping")
			_, err := p.Out.Write([]byte("WIPE-REPORT {}\n"))
			require.NoError(t, err)

			assert.Equal(t, tc.wantKmsg, kmsg.list)

			var lines []string

			for line := range strings.Lines(console.String()) {
				lines = append(lines, stamp.ReplaceAllString(strings.TrimSuffix(line, "\n"), ""))
			}

			assert.Equal(t, tc.wantConsole, lines)
		})
	}
}

func TestHalt(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name    string
		err     error
		wantLog string
	}{
		{name: "stopped"},
		{name: "refused", err: errors.New("reboot: operation not permitted"), wantLog: "ERROR the machine cannot be stopped; waiting forever"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			var (
				log           bytes.Buffer
				ended, waited bool
			)

			halt(NewLogger(zapcore.InfoLevel, &log), func() error {
				ended = true

				return tc.err
			}, func() { waited = true })

			assert.True(t, ended)
			assert.True(t, waited, "PID 1 must not return")

			if tc.wantLog == "" {
				assert.Empty(t, log.String())
			} else {
				assert.Contains(t, log.String(), tc.wantLog)
				assert.Contains(t, log.String(), tc.err.Error())
			}
		})
	}
}

func TestWaitPath(t *testing.T) {
	t.Parallel()

	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))

	late := filepath.Join(dir, "nvme0n1")

	go func() {
		time.Sleep(200 * time.Millisecond)
		os.WriteFile(late, nil, 0o644) //nolint:errcheck // the wait fails if this does
	}()

	for _, tc := range []struct {
		name    string
		path    string
		timeout time.Duration
		wantErr string
	}{
		{name: "there", path: file, timeout: time.Second},
		{name: "appears", path: late, timeout: 10 * time.Second},
		{name: "never", path: filepath.Join(dir, "sda"), timeout: 200 * time.Millisecond, wantErr: "did not appear: context deadline exceeded"},
		{name: "cannot", path: filepath.Join(file, "sda"), timeout: time.Second, wantErr: "not a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			ctx, cancel := context.WithTimeout(t.Context(), tc.timeout)
			defer cancel()

			err := WaitPath(ctx, tc.path)
			if tc.wantErr != "" {
				assert.ErrorContains(t, err, tc.wantErr)

				return
			}

			assert.NoError(t, err)
		})
	}
}
