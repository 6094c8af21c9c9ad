package initsys

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// PID1 is what a program running as init has once Start has run.
type PID1 struct {
	// Logger logs through the kernel's log where it takes every line, else on the
	// console (see PID1Logger).
	Logger *zap.Logger
	// Out writes what a person or a test reads on the console (reports, markers) as
	// whole lines, through the kernel's log like Logger.
	Out io.Writer
}

// Start does PID 1's first duties, each in time for the next: the console (stderr where
// /dev/console cannot be opened) to log on from the start, the pseudo filesystems
// (Mounts), then the kernel's log (it needs /dev and /proc). A mount that fails is
// logged, not fatal: PID 1 goes on with what it has.
func Start(level zapcore.LevelEnabler) *PID1 {
	return start(level, startEnv{
		root: "/",
		openConsole: func() (io.Writer, error) {
			f, err := OpenConsole()
			if err != nil {
				return nil, err
			}

			return f, nil
		},
		openKmsg: func() (io.Writer, error) { return OpenKernelLog() },
	})
}

// startEnv is what Start touches, so that tests can give it a root and writers.
type startEnv struct {
	root        string
	openConsole func() (io.Writer, error)
	openKmsg    func() (io.Writer, error)
}

func start(level zapcore.LevelEnabler, env startEnv) *PID1 {
	console, err := env.openConsole()
	if err != nil {
		console = os.Stderr
	}

	logger := NewLogger(level, console)

	if err := MountAll(logger, env.root, Mounts); err != nil {
		logger.Error("error mounting the pseudo filesystems", zap.Error(err))
	}

	p := &PID1{Out: console}

	var kmsg io.Writer

	p.Logger, kmsg = pid1Logger(level, console, env.openKmsg)
	if kmsg != nil {
		p.Out = NewKernelLog(kmsg, PriorityNotice, console)
	}

	return p
}

// Halt ends PID 1's run with end (PowerOff or Reboot) and never returns: PID 1 exiting
// panics the kernel. Should the kernel refuse, Halt logs why and waits forever.
func Halt(logger *zap.Logger, end func() error) {
	halt(logger, end, func() { select {} })
}

func halt(logger *zap.Logger, end func() error, forever func()) {
	if err := end(); err != nil {
		logger.Error("the machine cannot be stopped; waiting forever", zap.Error(err))
	}

	forever()
}

// WaitPath waits until path exists, polling: devtmpfs creates device nodes as drivers
// probe, after PID 1 has started, and without udev nothing tells when.
func WaitPath(ctx context.Context, path string) error {
	ticker := time.NewTicker(50 * time.Millisecond)
	defer ticker.Stop()

	for {
		_, err := os.Stat(path)
		if err == nil {
			return nil
		}

		if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("error waiting for %s: %w", path, err)
		}

		select {
		case <-ctx.Done():
			return fmt.Errorf("%s did not appear: %w", path, ctx.Err())
		case <-ticker.C:
		}
	}
}
