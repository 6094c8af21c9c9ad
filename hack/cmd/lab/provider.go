package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/anvil-metal/anvil/hack/internal/lab"
)

func newProviderCmd(dir *string) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "provider",
		Short: "The lab's provider",
	}

	var kill bool

	restart := &cobra.Command{
		Use: "restart",
		Short: "Restart the provider on its state, with the command line the lab started it with (Omni mode included); " +
			"no machine is powered on or off",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := lab.Load(*dir)
			if err != nil {
				return fmt.Errorf("no lab in %s: %w", *dir, err)
			}

			old := s.ProviderPID

			if err := s.RelaunchProvider(cmd.Context(), kill); err != nil {
				return err
			}

			how := "stopped"
			if kill {
				how = "killed"
			}

			fmt.Fprintf(cmd.OutOrStdout(), "provider %s (pid %d) and started again on its state: pid %d, serving on unix://%s\n",
				how, old, s.ProviderPID, s.ControlSocket())

			return s.WriteStatus(cmd.OutOrStdout())
		},
	}

	restart.Flags().BoolVar(&kill, "kill", false, "SIGKILL, as in a crash (none of the provider's own shutdown runs), instead of SIGTERM and its graceful stop")

	cmd.AddCommand(restart)

	return cmd
}
