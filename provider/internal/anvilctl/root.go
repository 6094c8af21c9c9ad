// Package anvilctl is the control CLI: it reads state through the provider's COSI state
// API and changes it through the transition service, as talosctl and omnictl do, and
// lists, seeds and prunes the provider's image cache (cache.go).
package anvilctl

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/status"

	"github.com/anvil-metal/anvil/internal/flagenv"
)

// DefaultEndpoint is the provider's control socket.
const DefaultEndpoint = "unix:///var/lib/anvil/control.sock"

// Main runs anvilctl with args and returns the exit code. Errors are printed as one line,
// the server's message for a gRPC error, never a stack or the usage.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmd := NewRootCommand()
	cmd.SetArgs(args)
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)

	if err := cmd.ExecuteContext(ctx); err != nil {
		fmt.Fprintf(stderr, "anvilctl: %s\n", ErrorMessage(err))

		return 1
	}

	return 0
}

// ErrorMessage returns what to tell the user about err: a gRPC status's own message
// rather than "rpc error: code = ... desc = ...".
func ErrorMessage(err error) string {
	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) {
		return se.GRPCStatus().Message()
	}

	return err.Error()
}

// NewRootCommand returns the anvilctl command tree.
func NewRootCommand() *cobra.Command {
	app := &app{}

	root := &cobra.Command{
		Use:           "anvilctl",
		Short:         "Control an Anvil provider: list machines, accept, allocate, power",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return flagenv.Apply(cmd.Flags(), nil)
		},
		PersistentPostRunE: func(*cobra.Command, []string) error {
			return app.close()
		},
	}

	root.PersistentFlags().StringVar(&app.endpoint, "endpoint", DefaultEndpoint,
		"control API endpoint: unix:///path/to/control.sock or tcp://host:port (TLS)")
	root.PersistentFlags().StringVar(&app.caCert, "ca-cert", "",
		"PEM file of the CA that signed a tcp:// endpoint's certificate (default: system roots)")
	root.PersistentFlags().StringVar(&app.cert, "cert", "", "client certificate (PEM) for a tcp:// endpoint: the provider's <state-dir>/admin.crt")
	root.PersistentFlags().StringVar(&app.key, "key", "", "client key (PEM) for a tcp:// endpoint: the provider's <state-dir>/admin.key")

	root.AddCommand(newGetCommand(app), newMachineCommand(app), newCacheCommand(app), newStateCommand(app))

	return root
}
