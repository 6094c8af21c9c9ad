// Package anvilctl is the control CLI: it reads state through the provider's COSI state
// API and changes it through the transition service, as talosctl and omnictl do.
package anvilctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc/status"
)

// DefaultEndpoint is the provider's control socket.
const DefaultEndpoint = "unix:///var/lib/anvil/control.sock"

// envPrefix prefixes the environment variable read for each flag: --endpoint is
// ANVIL_ENDPOINT, --ca-cert ANVIL_CA_CERT.
const envPrefix = "ANVIL_"

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
			return flagsFromEnv(cmd.Flags())
		},
		PersistentPostRunE: func(*cobra.Command, []string) error {
			return app.close()
		},
	}

	root.PersistentFlags().StringVar(&app.endpoint, "endpoint", DefaultEndpoint,
		"control API endpoint: unix:///path/to/control.sock or tcp://host:port (TLS)")
	root.PersistentFlags().StringVar(&app.caCert, "ca-cert", "",
		"PEM file of the CA that signed a tcp:// endpoint's certificate (default: system roots)")

	root.AddCommand(newGetCommand(app), newMachineCommand(app))

	return root
}

// flagsFromEnv sets each flag not given on the command line from ANVIL_<FLAG>, if set.
func flagsFromEnv(flags *pflag.FlagSet) error {
	var err error

	flags.VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Changed {
			return
		}

		name := envPrefix + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))

		v, ok := os.LookupEnv(name)
		if !ok {
			return
		}

		if setErr := flags.Set(f.Name, v); setErr != nil {
			err = fmt.Errorf("invalid %s: %w", name, setErr)
		}
	})

	return err
}
