// Command wipe-disk wipes the devices it is given with package wipe and prints one JSON
// report per device: for the benchmark (bench/run.sh wipe) and, run as PID 1 of a tiny
// initramfs, for the QEMU test of secure erase. As PID 1 (internal/initsys) it mounts the
// pseudo filesystems, loads the modules in /modules (in name order), waits for the
// devices, reports through the kernel's log, and powers off.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/anvil-metal/anvil/agent/internal/wipe"
	"github.com/anvil-metal/anvil/internal/initsys"
	"github.com/anvil-metal/anvil/internal/modules"
)

// modulesDir holds the modules PID 1 loads, named so that name order is load order.
const modulesDir = "/modules"

func main() {
	if initsys.IsPID1() {
		runPID1()
	}

	if err := run(context.Background(), os.Stdout, os.Args[1:]); err != nil {
		fmt.Println("WIPE-ERROR", err)
		os.Exit(1)
	}
}

// runPID1 never returns: PID 1 exiting panics the kernel.
func runPID1() {
	pid1 := initsys.Start(zapcore.InfoLevel)

	err := initsys.Guard(pid1.Logger, func() error {
		loaded, err := modules.LoadDir(modules.Finit{}, modulesDir)
		if err != nil {
			return err
		}

		pid1.Logger.Info("loaded kernel modules", zap.Strings("files", loaded))

		return run(context.Background(), pid1.Out, os.Args[1:])
	})
	if err != nil {
		fmt.Fprintln(pid1.Out, "WIPE-ERROR", err)
	}

	initsys.Halt(pid1.Logger, initsys.PowerOff)
}

func run(ctx context.Context, out io.Writer, args []string) error {
	fs := flag.NewFlagSet("wipe-disk", flag.ContinueOnError)
	mode := fs.String("mode", string(wipe.ModeFast), "fast, zeroes or secure-erase")
	wait := fs.Duration("wait", time.Minute, "how long to wait for the devices to appear")

	if err := fs.Parse(args); err != nil {
		return err
	}

	for _, dev := range fs.Args() {
		waitCtx, cancel := context.WithTimeout(ctx, *wait)
		err := initsys.WaitPath(waitCtx, dev)

		cancel()

		if err != nil {
			return err
		}

		report, err := wipe.Device(ctx, dev, wipe.Mode(*mode), nil)
		if err != nil {
			return err
		}

		b, err := json.Marshal(report)
		if err != nil {
			return fmt.Errorf("error encoding the report: %w", err)
		}

		fmt.Fprintln(out, "WIPE-REPORT", string(b))
	}

	return nil
}
