package proc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Child is a long-running child process the caller owns, leading a process group of its
// own: Stop ends it and everything it started. The kernel kills it should the caller
// die first (PR_SET_PDEATHSIG), so that a crashed benchmark or test leaves nothing.
type Child struct {
	name string
	cmd  *exec.Cmd
	log  *os.File

	// done is closed once the process has exited and err holds how.
	done chan struct{}
	err  error

	stopOnce sync.Once
}

// Start starts cmd as a child named name (for messages), stdout and stderr to a new file
// at logPath. cmd must not be made with exec.CommandContext: its life ends with Stop.
// A goroutine waits for the process; it ends when the process does.
func Start(name string, cmd *exec.Cmd, logPath string) (*Child, error) {
	log, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("error creating the log of %s: %w", name, err)
	}

	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}

	if err := cmd.Start(); err != nil {
		log.Close()

		return nil, fmt.Errorf("error starting %s: %w", name, err)
	}

	c := &Child{name: name, cmd: cmd, log: log, done: make(chan struct{})}

	go func() {
		c.err = cmd.Wait()
		close(c.done)
	}()

	return c, nil
}

// Name is the child's name.
func (c *Child) Name() string { return c.name }

// Pid is the child's process ID (and its process group's).
func (c *Child) Pid() int { return c.cmd.Process.Pid }

// Done is closed once the child has exited.
func (c *Child) Done() <-chan struct{} { return c.done }

// Exited reports whether the child has exited, and how.
func (c *Child) Exited() (bool, error) {
	select {
	case <-c.done:
		return true, c.err
	default:
		return false, nil
	}
}

// Stop sends SIGTERM to the child's process group and SIGKILL after grace, then waits
// for the child and closes its log. It is safe to call more than once and after the
// child exited by itself: the group may still hold what the child started.
func (c *Child) Stop(grace time.Duration) {
	c.stopOnce.Do(func() {
		pgid := c.cmd.Process.Pid

		// ESRCH: the group is empty already.
		syscall.Kill(-pgid, syscall.SIGTERM) //nolint:errcheck // see above

		timer := time.NewTimer(grace)
		defer timer.Stop()

		select {
		case <-c.done:
			// The leader is gone; what it started may not be.
			syscall.Kill(-pgid, syscall.SIGKILL) //nolint:errcheck // ESRCH: nothing left
		case <-timer.C:
			syscall.Kill(-pgid, syscall.SIGKILL) //nolint:errcheck // ESRCH: gone meanwhile
			<-c.done
		}

		c.log.Close()
	})
}

// WaitTCP waits until addr accepts TCP connections, the child exits, ctx ends or
// timeout passes.
func (c *Child) WaitTCP(ctx context.Context, addr string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	var d net.Dialer

	for {
		if exited, err := c.Exited(); exited {
			return fmt.Errorf("%s exited before listening on %s: %v", c.name, addr, err)
		}

		dctx, dcancel := context.WithTimeout(ctx, 200*time.Millisecond)
		conn, err := d.DialContext(dctx, "tcp", addr)

		dcancel()

		if err == nil {
			conn.Close()

			return nil
		}

		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("%s did not listen on %s within %s", c.name, addr, timeout)
			}

			return fmt.Errorf("error waiting for %s to listen on %s: %w", c.name, addr, ctx.Err())
		case <-c.done:
		case <-time.After(50 * time.Millisecond):
		}
	}
}
