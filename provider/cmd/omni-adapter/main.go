// Command omni-adapter is the provider's link to Omni: run by the provider in Omni mode
// (provider/internal/omnilink), it speaks to Omni with Omni's own client — the
// provider's status and health, Omni's join config — and hands what Omni says to the
// provider over the socket the provider serves it.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/anvil-metal/anvil/internal/flagenv"
	"github.com/anvil-metal/anvil/provider/internal/omni"
)

// version is the provider's version, set at build time (-ldflags -X).
var version = "dev"

func main() {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()

	if err := newRootCmd().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "omni-adapter:", err)
		os.Exit(1)
	}
}

func newRootCmd() *cobra.Command {
	opts := omni.Options{ProviderID: omni.DefaultProviderID, Version: version}

	cmd := &cobra.Command{
		Use:           "omni-adapter",
		Short:         "The Anvil provider's link to Omni (the provider runs it in Omni mode)",
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			return flagenv.Apply(cmd.Flags(), map[string][]string{"omni-api-endpoint": {"OMNI_ENDPOINT"}})
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger, err := zap.NewProduction()
			if err != nil {
				return err
			}

			defer logger.Sync() //nolint:errcheck // syncing stderr fails on terminals (EINVAL); nothing to do at exit

			// The key comes from the environment only: a command line is public.
			opts.ServiceAccountKey = os.Getenv("OMNI_SERVICE_ACCOUNT_KEY")
			opts.Logger = logger.Named("omni")

			c, err := omni.Dial(opts)
			if err != nil {
				return err
			}

			defer c.Close()

			return c.Run(cmd.Context())
		},
	}

	f := cmd.Flags()
	f.StringVar(&opts.Endpoint, "omni-api-endpoint", "", "Omni's API, https://host:port (also $OMNI_ENDPOINT)")
	f.StringVar(&opts.ProviderID, "id", opts.ProviderID, "the infra provider's ID in Omni")
	f.StringVar(&opts.Name, "provider-name", "Anvil", "the provider's name as Omni shows it")
	f.StringVar(&opts.Description, "provider-description", "", "the provider's description as Omni shows it")
	f.BoolVar(&opts.InsecureSkipTLSVerify, "insecure-skip-tls-verify", false, "skip verifying Omni's TLS certificate")
	f.StringVar(&opts.CACertFile, "omni-ca-cert", "", "PEM file of a CA trusted for Omni's certificate, besides the system's")
	f.StringVar(&opts.ProviderSocket, "provider-socket", "", "the provider's socket for its Omni adapter")
	f.StringVar(&opts.Version, "version", opts.Version, "the provider's version, as Omni shows it")

	flagenv.Annotate(f)

	return cmd
}
