// Command talos-record records real Talos' answers for the stand-in's replay tests
// (hack/internal/talosrecord): it boots make talos' Talos in QEMU, drives it from
// maintenance through its install, its installed boot and a reset, and writes what
// Talos answered and the events it sent to hack/cmd/talos-standin/testdata. It boots a
// VM, so it runs under the machine's VM lock, from the repository's root:
//
//	make talos
//	flock /tmp/anvil-vm.lock go run ./hack/cmd/talos-record
//
// About 15 minutes under TCG; --timeout bounds it (45 minutes by default). Needs
// qemu-system-x86_64, no root.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/anvil-metal/anvil/hack/internal/talosrecord"
)

func main() {
	assets := flag.String("talos-assets", "_out/talos/assets", "real Talos (make talos)")
	out := flag.String("out", talosrecord.DefaultFile, "the recording to write")
	work := flag.String("work", "", "the machine's disk, consoles and the factory's files (default: a temporary directory)")
	keep := flag.Bool("keep", false, "keep the work directory (with --work: its consoles, for a failed run)")
	timeout := flag.Duration("timeout", 45*time.Minute, "the whole recording's bound")
	flag.Parse()

	if err := run(*assets, *out, *work, *keep, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func run(assets, out, work string, keep bool, timeout time.Duration) error {
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		return fmt.Errorf("needs qemu-system-x86_64 (make setup installs qemu-system-x86): %w", err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	return talosrecord.Record(ctx, talosrecord.Options{ //nolint:wrapcheck // says what failed
		TalosAssets: assets, Out: out, Work: work, Keep: keep, QEMU: qemu,
		Command: "flock /tmp/anvil-vm.lock go run ./hack/cmd/talos-record",
		Log:     os.Stderr,
	})
}
