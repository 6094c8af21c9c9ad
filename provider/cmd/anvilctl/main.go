// Command anvilctl controls an Anvil provider: it lists machines and resources and makes
// the changes a person may make (accept, reject, allocate, power, …).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/anvil-metal/anvil/provider/internal/anvilctl"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := anvilctl.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)

	stop()
	os.Exit(code)
}
