// Package proc starts, watches and stops the processes that the lab and the benchmarks
// run: children the caller owns (Start), daemons that outlive it and are found again by
// pid (StartDaemon, Stop), commands run to completion (Run), and the sweep that finds
// processes by what their command line names (FindByArg). Every way of starting a
// process has a way of ending it and everything it started, pass or fail.
package proc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Alive reports whether pid runs; a zombie (exited, not yet reaped) does not.
func Alive(pid int) bool {
	if pid <= 0 {
		return false
	}

	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}

	state, ok := statState(stat)

	return ok && state != 'Z'
}

// statState is the state letter of a /proc/<pid>/stat line. It follows the command
// name in parentheses, which may itself contain spaces and parentheses.
func statState(stat []byte) (byte, bool) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 || i+2 >= len(stat) {
		return 0, false
	}

	return stat[i+2], true
}

// WaitGone waits up to d for pid to exit; false if it still runs then or ctx ends first.
func WaitGone(ctx context.Context, pid int, d time.Duration) bool {
	deadline := time.Now().Add(d)

	for Alive(pid) {
		if time.Now().After(deadline) {
			return false
		}

		select {
		case <-ctx.Done():
			return false
		case <-time.After(20 * time.Millisecond):
		}
	}

	return true
}

// Stop ends pid: SIGTERM, up to grace for it to go, then SIGKILL and up to 5 s more. A
// pid that does not run is already stopped. It signals the process only, not its group:
// the pid may come from a state file of a daemon that leads no group of its own.
func Stop(ctx context.Context, pid int, grace time.Duration) error {
	if !Alive(pid) {
		return nil
	}

	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("error signalling %d: %w", pid, err)
	}

	if WaitGone(ctx, pid, grace) {
		return nil
	}

	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("error killing %d: %w", pid, err)
	}

	if !WaitGone(ctx, pid, 5*time.Second) {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("error waiting for %d to exit: %w", pid, err)
		}

		return fmt.Errorf("process %d survived SIGKILL", pid)
	}

	return nil
}

// FindByArg lists the processes running one of programs (the base name of argv[0],
// matched as a filepath.Match pattern such as "qemu-system-*") that have an argument
// containing s. The lab names its directory in every daemon's arguments, so a lab whose
// state file is lost is still swept; limiting it to the daemons' programs spares the
// shells and tools that merely mention the directory (go test, grep…). This process is
// never listed.
func FindByArg(s string, programs ...string) []int {
	entries, _ := filepath.Glob("/proc/[0-9]*/cmdline") // a constant, valid pattern

	var pids []int

	self := os.Getpid()

	for _, e := range entries {
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(e)))
		if err != nil || pid == self {
			continue
		}

		cmdline, err := os.ReadFile(e)
		if err != nil {
			continue // gone meanwhile
		}

		if matchCmdline(cmdline, s, programs) {
			pids = append(pids, pid)
		}
	}

	return pids
}

// matchCmdline reports whether a NUL-separated command line runs one of programs with
// an argument containing s.
func matchCmdline(cmdline []byte, s string, programs []string) bool {
	args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	if len(args) < 2 || !matches(filepath.Base(args[0]), programs) {
		return false
	}

	for _, a := range args[1:] {
		if strings.Contains(a, s) {
			return true
		}
	}

	return false
}

func matches(base string, patterns []string) bool {
	for _, p := range patterns {
		if ok, err := filepath.Match(p, base); err == nil && ok {
			return true
		}
	}

	return false
}

// StartDaemon starts cmd as a daemon: in a session of its own (a terminal's Ctrl-C does
// not reach it), output appended to logPath, outliving the caller (the lab's command
// exits after "up"); the caller records the pid and ends it with Stop. A cmd made with
// exec.CommandContext is killed when its context ends: a daemon's must not end
// (context.WithoutCancel). While the caller lives on (tests), a goroutine reaps the
// daemon when it exits, so that it leaves no zombie; that goroutine ends with the
// daemon.
func StartDaemon(cmd *exec.Cmd, logPath string) (int, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 0, fmt.Errorf("error opening %s: %w", logPath, err)
	}

	defer f.Close() // the daemon has its own copy

	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}

	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("error starting %s: %w", cmd.Path, err)
	}

	go cmd.Wait() //nolint:errcheck // only reaps; the daemon's owner watches it by pid

	return cmd.Process.Pid, nil
}

// Run runs argv to completion, bounded by ctx, and returns its combined output. It runs
// in a process group of its own, and on ctx's end the whole group is killed, so that
// nothing it started outlives it (ip netns exec, taskset and shells exec or fork).
func Run(ctx context.Context, argv ...string) (string, error) {
	if len(argv) == 0 {
		return "", errors.New("no command to run")
	}

	var out bytes.Buffer

	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 2 * time.Second

	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, tail(out.String(), 400))
	}

	return out.String(), nil
}

// ExitCode is the exit code in err, or -1 when err is no exit.
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

// Pinned prefixes argv with taskset pinning it to cpu; a negative cpu leaves it as is.
func Pinned(cpu int, argv ...string) []string {
	if cpu < 0 {
		return argv
	}

	return append([]string{"taskset", "-c", strconv.Itoa(cpu)}, argv...)
}
