// Command capi-manager is Anvil's Cluster API infrastructure provider: it provisions
// MetalMachines on servers a standalone Anvil provider hands out, through its control API.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/anvil-metal/anvil/provider/internal/capi/manager"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := manager.Main(ctx, os.Args[1:], os.Stderr)

	stop()

	if err != nil {
		fmt.Fprintln(os.Stderr, "capi-manager:", err)
		os.Exit(1)
	}
}
