// Command disk-health checks the disks it is given with package health and prints one
// JSON check per disk ("HEALTH-CHECK {…}"): run as PID 1 of a tiny initramfs, for the
// QEMU test of the NVMe health checks. As PID 1 (internal/initsys) it mounts the pseudo
// filesystems, loads the modules in /modules, waits for the devices, reports through the
// kernel's log, and powers off.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/anvil-metal/anvil/agent/internal/health"
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
		fmt.Println("HEALTH-ERROR", err)
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
		fmt.Fprintln(pid1.Out, "HEALTH-ERROR", err)
	}

	initsys.Halt(pid1.Logger, initsys.PowerOff)
}

func run(ctx context.Context, out io.Writer, args []string) error {
	fs := flag.NewFlagSet("disk-health", flag.ContinueOnError)
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

		name := filepath.Base(dev)
		component := "disk " + name

		check := health.NoSMART(component, "virtio")
		if strings.HasPrefix(name, "nvme") {
			check = health.CheckNVMeDevice(component, dev, health.DefaultThresholds)
		}

		b, err := json.Marshal(check)
		if err != nil {
			return fmt.Errorf("error encoding the check: %w", err)
		}

		fmt.Fprintln(out, "HEALTH-CHECK", string(b))
	}

	return nil
}
