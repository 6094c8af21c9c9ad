package initsys

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"sync"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// Reaper collects the zombies PID 1 inherits. wait4(-1) would also steal
// the exit status of children the agent itself waits for (os/exec), so
// commands started through Reaper.Run hold the reaper off until they are
// waited for.
type Reaper struct {
	logger *zap.Logger
	// Run holds mu shared from Start to Wait; a sweep holds it exclusively.
	mu sync.RWMutex
}

// NewReaper returns a Reaper; run Reap in a goroutine.
func NewReaper(logger *zap.Logger) *Reaper {
	if logger == nil {
		logger = zap.NewNop()
	}

	return &Reaper{logger: logger}
}

// Reap reaps children on every SIGCHLD until ctx ends.
func (r *Reaper) Reap(ctx context.Context) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, unix.SIGCHLD)

	defer signal.Stop(sig)

	// Children may have exited before Notify was in place.
	r.sweep()

	for {
		select {
		case <-ctx.Done():
			return
		case <-sig:
			r.sweep()
		}
	}
}

// sweep waits for every exited child, without blocking.
func (r *Reaper) sweep() {
	r.mu.Lock()
	defer r.mu.Unlock()

	for {
		var ws unix.WaitStatus

		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}

		if err != nil || pid <= 0 {
			return // ECHILD: none left; 0: the rest still run
		}

		r.logger.Debug("reaped", zap.Int("pid", pid), zap.Int("status", ws.ExitStatus()))
	}
}

// Run starts cmd and waits for it, with the reaper held off meanwhile so
// the exit status reaches cmd.Wait.
func (r *Reaper) Run(cmd *exec.Cmd) error {
	r.mu.RLock()
	defer r.mu.RUnlock()

	return cmd.Run()
}
