// Package sys holds what the benchmarks need from the host: child processes that are
// always killed, network namespaces that are always deleted, CPU pinning, RSS.
package sys

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/anvil-metal/anvil/internal/freeport"
)

// Proc is a long-running child process in its own process group.
type Proc struct {
	Name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	log  *os.File
	once sync.Once
}

// Start starts argv with stdout and stderr going to logPath. The process gets its own
// process group so that Stop kills it and anything it started.
func Start(name, logPath string, argv ...string) (*Proc, error) {
	return StartEnv(name, logPath, nil, argv...)
}

// StartEnv is Start with env (KEY=value) added to the environment.
func StartEnv(name, logPath string, env []string, argv ...string) (*Proc, error) {
	log, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("error creating the log of %s: %w", name, err)
	}

	cmd := exec.Command(argv[0], argv[1:]...) //nolint:gosec
	cmd.Stdout = log
	cmd.Stderr = log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}

	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}

	if err = cmd.Start(); err != nil {
		log.Close() //nolint:errcheck

		return nil, fmt.Errorf("error starting %s: %w", name, err)
	}

	p := &Proc{Name: name, cmd: cmd, done: make(chan struct{}), log: log}

	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()

	return p, nil
}

// Pid is the process ID.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Exited reports whether the process has exited, and its error.
func (p *Proc) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Stop sends SIGTERM to the process group, then SIGKILL after grace. It is safe to call
// more than once.
func (p *Proc) Stop(grace time.Duration) {
	p.once.Do(func() {
		pgid := p.cmd.Process.Pid
		syscall.Kill(-pgid, syscall.SIGTERM) //nolint:errcheck

		select {
		case <-p.done:
		case <-time.After(grace):
			syscall.Kill(-pgid, syscall.SIGKILL) //nolint:errcheck
			<-p.done
		}

		p.log.Close() //nolint:errcheck
	})
}

// Run runs argv to completion (bounded by ctx) and returns its combined output. On ctx
// cancellation the whole process group is killed.
func Run(ctx context.Context, argv ...string) (string, error) {
	var out bytes.Buffer

	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...) //nolint:gosec
	cmd.Stdout = &out
	cmd.Stderr = &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 2 * time.Second

	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, tail(out.String(), 400))
	}

	return out.String(), nil
}

// ExitCode returns the exit code in err, or -1.
func ExitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}

	return -1
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}

	return "…" + s[len(s)-n:]
}

// FreePort returns a TCP port free on 127.0.0.1 (see freeport).
func FreePort() (int, error) {
	port, err := freeport.TCP()
	if err != nil {
		return 0, fmt.Errorf("error finding a free port: %w", err)
	}

	return port, nil
}

// WaitTCP waits until addr accepts connections, p exits, or timeout passes.
func WaitTCP(addr string, p *Proc, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)

	for time.Now().Before(deadline) {
		if exited, err := p.Exited(); exited {
			return fmt.Errorf("%s exited before listening on %s: %v", p.Name, addr, err)
		}

		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close() //nolint:errcheck

			return nil
		}

		time.Sleep(50 * time.Millisecond)
	}

	return fmt.Errorf("%s did not listen on %s within %s", p.Name, addr, timeout)
}

// RSSBytes reads VmRSS of pid.
func RSSBytes(pid int) (int64, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, fmt.Errorf("error reading the status of %d: %w", pid, err)
	}
	defer f.Close() //nolint:errcheck

	b, err := io.ReadAll(f)
	if err != nil {
		return 0, fmt.Errorf("error reading the status of %d: %w", pid, err)
	}

	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			fields := strings.Fields(v)
			if len(fields) < 1 {
				break
			}

			kb, err := strconv.ParseInt(fields[0], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("error parsing VmRSS %q: %w", v, err)
			}

			return kb << 10, nil
		}
	}

	return 0, fmt.Errorf("no VmRSS in the status of %d", pid)
}

// Pinned prefixes argv with taskset pinning it to cpu (when cpu >= 0 and the host has
// more than one CPU).
func Pinned(cpu int, argv ...string) []string {
	if cpu < 0 {
		return argv
	}

	return append([]string{"taskset", "-c", strconv.Itoa(cpu)}, argv...)
}

// CPUTime is the user+system CPU time pid has used, from /proc/<pid>/stat.
func CPUTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("error reading the stat of %d: %w", pid, err)
	}

	// The command name may hold spaces: fields count from after its closing parenthesis.
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])

	if len(fields) < 13 {
		return 0, fmt.Errorf("short stat of %d", pid)
	}

	var ticks int64

	for _, f := range fields[11:13] { // utime, stime (fields 14 and 15 of the line)
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("error parsing the stat of %d: %w", pid, err)
		}

		ticks += v
	}

	const clockTicks = 100 // USER_HZ on Linux

	return time.Duration(ticks) * time.Second / clockTicks, nil
}
