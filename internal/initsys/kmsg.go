package initsys

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Syslog priorities of kernel log lines (facility user): the kernel prints a line on
// its consoles when its level is below the console's (7 by default, 4 with "quiet").
const (
	PriorityError  = 1<<3 | 3
	PriorityWarn   = 1<<3 | 4
	PriorityNotice = 1<<3 | 5
	PriorityInfo   = 1<<3 | 6
	PriorityDebug  = 1<<3 | 7
)

// devkmsgSysctl is printk.devkmsg: "on" lets every line through, "ratelimit" (the
// default) a burst of 10 per 5 s per writer.
const devkmsgSysctl = "/proc/sys/kernel/printk_devkmsg"

// OpenKernelLog opens /dev/kmsg for writing, lifting the kernel's rate limit first: PID 1
// logs more than it lets through. Where the limit stays (set on the cmdline), lines
// would be lost, so it fails and the caller writes to the console instead.
func OpenKernelLog() (*os.File, error) {
	// A cmdline setting locks the sysctl; the write then fails and the read says which.
	_ = os.WriteFile(devkmsgSysctl, []byte("on\n"), 0)

	b, err := os.ReadFile(devkmsgSysctl)
	if err != nil {
		return nil, fmt.Errorf("reading printk.devkmsg: %w", err)
	}

	if v := strings.TrimSpace(string(b)); v != "on" {
		return nil, fmt.Errorf("the kernel log would drop lines (printk.devkmsg=%s)", v)
	}

	f, err := os.OpenFile("/dev/kmsg", os.O_WRONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("opening the kernel log: %w", err)
	}

	return f, nil
}

// KernelLog writes lines to the kernel's log (an open /dev/kmsg), which prints each one
// whole on every console. A line written to a serial console directly can be cut in two
// by the kernel's own messages, printed as they come (disks and NICs still probing) —
// and a person or a test reading the console looks for whole lines. Talos logs the same
// way.
type KernelLog struct {
	mu       sync.Mutex
	kmsg     io.Writer
	priority int
	fallback io.Writer
	pending  []byte
}

// NewKernelLog writes lines at priority to kmsg; a line the kernel refuses (longer than
// a record) goes to fallback instead.
func NewKernelLog(kmsg io.Writer, priority int, fallback io.Writer) *KernelLog {
	return &KernelLog{kmsg: kmsg, priority: priority, fallback: fallback}
}

// Write writes every complete line of p as one record; the rest waits for its newline.
func (k *KernelLog) Write(p []byte) (int, error) {
	k.mu.Lock()
	defer k.mu.Unlock()

	k.pending = append(k.pending, p...)

	var errs []error

	for {
		i := bytes.IndexByte(k.pending, '\n')
		if i < 0 {
			break
		}

		line := k.pending[:i+1]
		k.pending = k.pending[i+1:]

		// One write is one record; its "<priority>" prefix is not printed.
		if _, err := fmt.Fprintf(k.kmsg, "<%d>%s", k.priority, line); err != nil {
			if _, ferr := k.fallback.Write(line); ferr != nil {
				errs = append(errs, fmt.Errorf("writing a line to the kernel log (%w) and to the console: %w", err, ferr))
			}
		}
	}

	if len(errs) > 0 {
		return len(p), errs[0]
	}

	return len(p), nil
}

// Sync is a no-op: every complete line is written as it comes.
func (k *KernelLog) Sync() error { return nil }

// NewKernelLogger is NewLogger writing to the kernel log (see KernelLog), each entry at
// the priority of its level, so that the console shows what the kernel's console level
// lets through; lines the kernel refuses go to fallback. The kernel stamps each line
// with the time since boot, so the entries carry none of their own.
func NewKernelLogger(level zapcore.LevelEnabler, kmsg, fallback io.Writer) *zap.Logger {
	cfg := encoderConfig(bootTime())
	cfg.TimeKey = ""

	// Each level band, its own priority; the boundaries are zap's levels.
	bands := []struct {
		from, to zapcore.Level
		priority int
	}{
		{zapcore.DebugLevel, zapcore.DebugLevel, PriorityDebug},
		{zapcore.InfoLevel, zapcore.InfoLevel, PriorityInfo},
		{zapcore.WarnLevel, zapcore.WarnLevel, PriorityWarn},
		{zapcore.ErrorLevel, zapcore.FatalLevel, PriorityError},
	}

	cores := make([]zapcore.Core, 0, len(bands))

	for _, b := range bands {
		enabled := zap.LevelEnablerFunc(func(l zapcore.Level) bool { return level.Enabled(l) && l >= b.from && l <= b.to })
		cores = append(cores, zapcore.NewCore(zapcore.NewConsoleEncoder(cfg), NewKernelLog(kmsg, b.priority, fallback), enabled))
	}

	return zap.New(zapcore.NewTee(cores...), zap.ErrorOutput(zapcore.AddSync(io.Discard)))
}

// PID1Logger is PID 1's logger, once the pseudo filesystems are mounted: through the
// kernel log (see KernelLog) where it takes every line, with kmsg returned for other
// writers; else on console, with a warning saying why, and kmsg nil.
func PID1Logger(level zapcore.LevelEnabler, console io.Writer) (logger *zap.Logger, kmsg io.Writer) {
	return pid1Logger(level, console, func() (io.Writer, error) { return OpenKernelLog() })
}

// pid1Logger is PID1Logger with the kernel log opened by openKmsg.
func pid1Logger(level zapcore.LevelEnabler, console io.Writer, openKmsg func() (io.Writer, error)) (*zap.Logger, io.Writer) {
	kmsg, err := openKmsg()
	if err != nil {
		logger := NewLogger(level, console)
		logger.Warn("logging on the console", zap.Error(err))

		return logger, nil
	}

	return NewKernelLogger(level, kmsg, console), kmsg
}
