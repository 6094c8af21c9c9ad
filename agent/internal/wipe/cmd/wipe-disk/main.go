// Command wipe-disk wipes the devices it is given with package wipe and prints one JSON
// report per device: for the benchmark (bench/run.sh wipe) and, run as PID 1 of a tiny
// initramfs, for the QEMU test of secure erase. As PID 1 it mounts /proc, /sys and /dev,
// loads the modules in /modules (in name order), waits for the devices, and powers off.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"golang.org/x/sys/unix"

	"github.com/anvil-metal/anvil/agent/internal/wipe"
)

func main() {
	asInit := os.Getpid() == 1

	err := run(asInit, os.Args[1:])
	if err != nil {
		fmt.Println("WIPE-ERROR", err)
	}

	if asInit {
		unix.Sync()
		_ = unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF) // nothing is left to tell
	}

	if err != nil {
		os.Exit(1)
	}
}

func run(asInit bool, args []string) error {
	fs := flag.NewFlagSet("wipe-disk", flag.ContinueOnError)
	mode := fs.String("mode", string(wipe.ModeFast), "fast, zeroes or secure-erase")
	wait := fs.Duration("wait", time.Minute, "how long to wait for the devices to appear")

	if err := fs.Parse(args); err != nil {
		return err
	}

	ctx := context.Background()

	if asInit {
		if err := setUp(); err != nil {
			return err
		}
	}

	for _, dev := range fs.Args() {
		if err := waitFor(dev, *wait); err != nil {
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

		fmt.Println("WIPE-REPORT", string(b))
	}

	return nil
}

func setUp() error {
	for _, m := range []struct{ src, dir, typ string }{
		{"proc", "/proc", "proc"}, {"sysfs", "/sys", "sysfs"}, {"devtmpfs", "/dev", "devtmpfs"},
	} {
		if err := os.MkdirAll(m.dir, 0o755); err != nil {
			return fmt.Errorf("error creating %s: %w", m.dir, err)
		}

		if err := unix.Mount(m.src, m.dir, m.typ, 0, ""); err != nil && !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("error mounting %s: %w", m.dir, err)
		}
	}

	mods, err := filepath.Glob("/modules/*.ko")
	if err != nil {
		return fmt.Errorf("error listing modules: %w", err)
	}

	sort.Strings(mods)

	for _, m := range mods {
		if err := loadModule(m); err != nil {
			return err
		}
	}

	return nil
}

func loadModule(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("error opening module %s: %w", path, err)
	}

	defer f.Close()

	if err = unix.FinitModule(int(f.Fd()), "", 0); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("error loading module %s: %w", path, err)
	}

	return nil
}

func waitFor(dev string, limit time.Duration) error {
	deadline := time.Now().Add(limit)

	for {
		_, err := os.Stat(dev)
		if err == nil {
			return nil
		}

		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not appear within %s: %w", dev, limit, err)
		}

		time.Sleep(100 * time.Millisecond)
	}
}
