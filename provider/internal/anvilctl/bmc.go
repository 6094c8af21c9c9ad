package anvilctl

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	controlv1 "github.com/anvil-metal/anvil/api/control/v1"
)

func newBMCCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bmc",
		Short: "Tell the provider how to reach a machine's BMC",
	}

	var (
		req           controlv1.SetBMCRequest
		passwordFile  string
		passwordStdin bool
	)

	set := &cobra.Command{
		Use:   "set <uuid>",
		Short: "Set a machine's BMC (the machine need not have booted yet); the password is stored encrypted and never shown",
		Example: `  anvilctl machine bmc set 4c4c4544-… --kind ipmi --address 10.0.0.5 --username admin --password-file pw.txt
  anvilctl machine bmc set 4c4c4544-… --kind redfish --address bmc-7.example --username root --password-stdin < pw.txt
  anvilctl machine bmc set 4c4c4544-… --kind api --address http://10.77.0.1:8090`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.MachineId = args[0]

			if req.GetKind() == "" {
				return errors.New("--kind is required (ipmi, redfish, api, none)")
			}

			password, err := readPassword(cmd.InOrStdin(), passwordFile, passwordStdin)
			if err != nil {
				return err
			}

			req.Password = password

			c, err := a.transitions()
			if err != nil {
				return err
			}

			resp, err := c.SetBMC(cmd.Context(), &req)
			if err != nil {
				return err
			}

			_, err = fmt.Fprintf(cmd.OutOrStdout(), "machine %s: BMC %s\n", resp.GetMachineId(), resp.GetEndpoint())

			return err
		},
	}

	set.Flags().StringVar(&req.Kind, "kind", "", "ipmi, redfish, api or none")
	set.Flags().StringVar(&req.Address, "address", "", "BMC host or IP (ipmi, redfish); base URL (api)")
	set.Flags().Uint32Var(&req.Port, "port", 0, "BMC port (0: the backend's default)")
	set.Flags().StringVar(&req.Username, "username", "", "BMC user")
	set.Flags().StringVar(&passwordFile, "password-file", "", "read the BMC password from this file (first line)")
	set.Flags().BoolVar(&passwordStdin, "password-stdin", false, "read the BMC password from stdin (first line)")
	set.Flags().BoolVar(&req.Insecure, "insecure", false, "skip TLS verification (redfish)")
	set.Flags().StringVar(&req.SystemId, "system-id", "", "the Redfish System to drive (default: the one with the machine's UUID)")

	remove := &cobra.Command{
		Use:   "remove <uuid>",
		Short: "Forget a machine's BMC (its power becomes manual)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.transitions()
			if err != nil {
				return err
			}

			if _, err := c.SetBMC(cmd.Context(), &controlv1.SetBMCRequest{MachineId: args[0]}); err != nil {
				return err
			}

			_, err = fmt.Fprintf(cmd.OutOrStdout(), "machine %s: BMC removed\n", args[0])

			return err
		},
	}

	cmd.AddCommand(set, remove)

	return cmd
}

// readPassword reads a password from a file or stdin (never from a flag, which would
// leave it in the shell's history and the process list).
func readPassword(stdin io.Reader, file string, fromStdin bool) (string, error) {
	var r io.Reader

	switch {
	case file != "" && fromStdin:
		return "", errors.New("--password-file and --password-stdin exclude each other")
	case file != "":
		f, err := os.Open(file)
		if err != nil {
			return "", fmt.Errorf("error opening the password file: %w", err)
		}
		defer f.Close()

		r = f
	case fromStdin:
		r = stdin
	default:
		return "", nil
	}

	line, err := bufio.NewReader(io.LimitReader(r, 4096)).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("error reading the password: %w", err)
	}

	return strings.TrimRight(line, "\r\n"), nil
}
