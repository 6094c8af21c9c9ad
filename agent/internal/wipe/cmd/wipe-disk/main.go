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
	"time"

	"github.com/anvil-metal/anvil/agent/internal/wipe"
	"github.com/anvil-metal/anvil/internal/initsys"
)

func main() { initsys.RunTool("WIPE", run) }

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
