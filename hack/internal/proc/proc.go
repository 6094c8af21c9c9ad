// Package proc finds and stops the lab's processes by pid, which outlive the command that
// started them (the lab CLI exits after "up").
package proc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
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

	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}

	// The state follows the command name in parentheses, which may contain spaces.
	i := bytes.LastIndexByte(stat, ')')

	return i >= 0 && i+2 < len(stat) && stat[i+2] != 'Z'
}

// Stop sends SIGTERM, waits up to grace, then SIGKILLs and waits for the process to go.
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
		return fmt.Errorf("process %d survived SIGKILL", pid)
	}

	return nil
}

// WaitGone waits up to d for pid to exit.
func WaitGone(ctx context.Context, pid int, d time.Duration) bool {
	deadline := time.Now().Add(d)

	for Alive(pid) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}

		time.Sleep(50 * time.Millisecond)
	}

	return true
}

// FindByArg lists the processes with an argument containing s (a lab directory: every
// process the lab starts names it), so a lab whose state file is lost is still swept.
func FindByArg(s string) []int {
	entries, _ := filepath.Glob("/proc/[0-9]*/cmdline")

	var pids []int

	self := os.Getpid()

	for _, e := range entries {
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(e)))
		if err != nil || pid == self {
			continue
		}

		cmdline, err := os.ReadFile(e)
		if err != nil {
			continue
		}

		args := strings.Split(string(cmdline), "\x00")
		// Skip the shells and tools that merely mention the directory (go test, grep…):
		// only the lab's own daemons are swept.
		if len(args) == 0 || !isLabDaemon(args[0]) {
			continue
		}

		for _, a := range args[1:] {
			if strings.Contains(a, s) {
				pids = append(pids, pid)

				break
			}
		}
	}

	return pids
}

func isLabDaemon(argv0 string) bool {
	switch base := filepath.Base(argv0); {
	case strings.HasPrefix(base, "qemu-system"), base == "dnsmasq", base == "provider", base == "ip", base == "lab-factory",
		base == "lab-power", base == "ipmi_sim":
		return true
	default:
		return false
	}
}
