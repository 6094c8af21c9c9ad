// Command bench runs Anvil's benchmarks against peers (dnsmasq, nginx) on the same load
// and prints the ratios: bench dhcp | http | all.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/anvil-metal/anvil/bench/internal/runner"
)

func main() {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()

	if err := runner.Main(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		cancel()
		os.Exit(1)
	}
}
