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
	"path/filepath"
	"strings"
	"time"

	"github.com/anvil-metal/anvil/agent/internal/health"
	"github.com/anvil-metal/anvil/internal/initsys"
)

func main() { initsys.RunTool("HEALTH", run) }

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
