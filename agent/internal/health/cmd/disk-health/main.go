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
	"strconv"
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

		size, err := sysfsSize(name)
		if err != nil {
			return err
		}

		for _, c := range []health.Check{check, health.ReadTest(ctx, component, dev, size, health.DefaultReadBudget)} {
			b, err := json.Marshal(c)
			if err != nil {
				return fmt.Errorf("error encoding the check: %w", err)
			}

			fmt.Fprintln(out, "HEALTH-CHECK", string(b))
		}
	}

	return nil
}

// sysfsSize is the disk's size in bytes, as sysfs counts it (512-byte sectors).
func sysfsSize(name string) (uint64, error) {
	b, err := os.ReadFile(filepath.Join("/sys/block", name, "size"))
	if err != nil {
		return 0, fmt.Errorf("error reading the size of %s: %w", name, err)
	}

	sectors, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("error reading the size of %s: %w", name, err)
	}

	return sectors * 512, nil
}
