package initsys

import (
	"context"
	"fmt"
	"io"
	"os"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/anvil-metal/anvil/internal/modules"
)

// ToolModules holds the modules a tool run as PID 1 loads, named so that name order is
// load order (modules.LoadDir).
const ToolModules = "/modules"

// RunTool runs a small command (wipe-disk, disk-health) with its arguments: from a
// shell, printing to stdout; as PID 1 of a tiny initramfs (a QEMU test), after mounting
// the pseudo filesystems and loading ToolModules, printing through the kernel's log, and
// then powering off. An error is printed as "<tag>-ERROR …". As PID 1 it never returns.
func RunTool(tag string, run func(ctx context.Context, out io.Writer, args []string) error) {
	if !IsPID1() {
		if err := run(context.Background(), os.Stdout, os.Args[1:]); err != nil {
			fmt.Println(tag+"-ERROR", err)
			os.Exit(1)
		}

		return
	}

	pid1 := Start(zapcore.InfoLevel)

	err := Guard(pid1.Logger, func() error {
		loaded, err := modules.LoadDir(modules.Finit{}, ToolModules)
		if err != nil {
			return err
		}

		pid1.Logger.Info("loaded kernel modules", zap.Strings("files", loaded))

		return run(context.Background(), pid1.Out, os.Args[1:])
	})
	if err != nil {
		fmt.Fprintln(pid1.Out, tag+"-ERROR", err)
	}

	Halt(pid1.Logger, PowerOff)
}
