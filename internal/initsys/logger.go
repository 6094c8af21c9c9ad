package initsys

import (
	"fmt"
	"io"
	"os"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sys/unix"
)

// NewLogger returns a logger writing one human-readable line per entry to
// each of ws, stamped like the kernel's own log ("[   12.345]", seconds
// since boot) so agent and kernel lines read on one console in order:
//
//	[   12.345] INFO  modules  loaded kernel module  {"module": "virtio_net"}
func NewLogger(level zapcore.LevelEnabler, ws ...io.Writer) *zap.Logger {
	syncers := make([]zapcore.WriteSyncer, 0, len(ws))
	for _, w := range ws {
		syncers = append(syncers, zapcore.Lock(zapcore.AddSync(w)))
	}

	core := zapcore.NewCore(zapcore.NewConsoleEncoder(encoderConfig(bootTime())), zapcore.NewMultiWriteSyncer(syncers...), level)

	// Errors from a console that went away are not worth a crash or a loop.
	return zap.New(core, zap.ErrorOutput(zapcore.AddSync(io.Discard)))
}

// OpenConsole opens /dev/console for writing (without making it the
// controlling terminal); the caller closes it. Outside an initramfs it may
// be missing or forbidden: fall back to os.Stderr then.
func OpenConsole() (*os.File, error) {
	f, err := os.OpenFile("/dev/console", os.O_WRONLY|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, fmt.Errorf("opening console: %w", err)
	}

	return f, nil
}

func encoderConfig(boot time.Time) zapcore.EncoderConfig {
	return zapcore.EncoderConfig{
		TimeKey:       "T",
		LevelKey:      "L",
		NameKey:       "N",
		MessageKey:    "M",
		StacktraceKey: "S",
		LineEnding:    zapcore.DefaultLineEnding,
		EncodeLevel: func(l zapcore.Level, enc zapcore.PrimitiveArrayEncoder) {
			enc.AppendString(fmt.Sprintf("%-5s", l.CapitalString()))
		},
		EncodeTime: func(t time.Time, enc zapcore.PrimitiveArrayEncoder) {
			enc.AppendString(sinceBoot(boot, t))
		},
		EncodeDuration:   zapcore.StringDurationEncoder,
		EncodeName:       zapcore.FullNameEncoder,
		ConsoleSeparator: " ",
	}
}

// sinceBoot formats t as the kernel's log does: seconds since boot with
// millisecond precision.
func sinceBoot(boot, t time.Time) string {
	d := t.Sub(boot)
	if d < 0 {
		d = 0
	}

	return fmt.Sprintf("[%5d.%03d]", int64(d/time.Second), int64(d%time.Second/time.Millisecond))
}

// bootTime is the wall-clock instant the monotonic clock started, so entry
// times (wall clock, with Go's monotonic reading) map onto seconds since
// boot. CLOCK_MONOTONIC is what printk stamps with.
func bootTime() time.Time {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return time.Now()
	}

	return time.Now().Add(-time.Duration(ts.Nano()))
}
