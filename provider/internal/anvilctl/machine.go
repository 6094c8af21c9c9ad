package anvilctl

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	controlv1 "github.com/anvil-metal/anvil/api/control/v1"
)

// maxConfigRead bounds how much of --config is read; the server refuses more than 1 MiB
// with a clear message, so one byte over is enough to let it say so.
const maxConfigRead = 1<<20 + 1

func newMachineCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "machine",
		Aliases: []string{"m", "machines"},
		Short:   "Change what is asked of a machine: accept, reject, allocate, power, …",
	}

	// Transitions that take only the machine ID; each returns the line saying what it did.
	for _, t := range []struct {
		use, short string
		call       func(context.Context, controlv1.TransitionServiceClient, string) (string, error)
	}{
		{"reject", "Reject a machine: the provider leaves it alone (it boots from disk)", func(ctx context.Context, c controlv1.TransitionServiceClient, id string) (string, error) {
			resp, err := c.Reject(ctx, &controlv1.RejectRequest{MachineId: id})

			return intentLine(resp.GetIntent()), err
		}},
		{"deallocate", "Take an allocated machine back; it is wiped before it is handed out again", func(ctx context.Context, c controlv1.TransitionServiceClient, id string) (string, error) {
			resp, err := c.Deallocate(ctx, &controlv1.DeallocateRequest{MachineId: id})

			return intentLine(resp.GetIntent()), err
		}},
		{"cordon", "Keep a machine from being handed out", func(ctx context.Context, c controlv1.TransitionServiceClient, id string) (string, error) {
			resp, err := c.Cordon(ctx, &controlv1.CordonRequest{MachineId: id})

			return intentLine(resp.GetIntent()), err
		}},
		{"uncordon", "Lift a cordon", func(ctx context.Context, c controlv1.TransitionServiceClient, id string) (string, error) {
			resp, err := c.Uncordon(ctx, &controlv1.UncordonRequest{MachineId: id})

			return intentLine(resp.GetIntent()), err
		}},
		{"installed", "Record by hand that Talos is installed for the machine's current allocation", func(ctx context.Context, c controlv1.TransitionServiceClient, id string) (string, error) {
			resp, err := c.MarkInstalled(ctx, &controlv1.MarkInstalledRequest{MachineId: id})

			return fmt.Sprintf("machine %s: installed (allocation %s)", id, resp.GetAllocationId()), err
		}},
		{"reboot", "Reboot an accepted machine through its BMC (PXE once, then a power cycle)", func(ctx context.Context, c controlv1.TransitionServiceClient, id string) (string, error) {
			resp, err := c.Reboot(ctx, &controlv1.RebootRequest{MachineId: id})

			return fmt.Sprintf("machine %s: reboot requested (%s)", id, resp.GetRebootId()), err
		}},
	} {
		cmd.AddCommand(&cobra.Command{
			Use:   t.use + " <id>",
			Short: t.short,
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				c, err := a.transitions()
				if err != nil {
					return err
				}

				line, err := t.call(cmd.Context(), c, args[0])
				if err != nil {
					return err
				}

				_, err = fmt.Fprintln(cmd.OutOrStdout(), line)

				return err
			},
		})
	}

	cmd.AddCommand(newAcceptCommand(a), newAllocateCommand(a), newPowerCommand(a), newBMCCommand(a),
		newLabelCommand(a), newWipeModeCommand(a), newWipeScopeCommand(a), newKexecModeCommand(a))

	return cmd
}

func newAcceptCommand(a *app) *cobra.Command {
	var req controlv1.AcceptRequest

	cmd := &cobra.Command{
		Use:   "accept <id>",
		Short: "Accept a pending or rejected machine: the provider wipes it, then may use it",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.transitions()
			if err != nil {
				return err
			}

			req.MachineId = args[0]

			resp, err := c.Accept(cmd.Context(), &req)
			if err != nil {
				return err
			}

			return printIntent(cmd.OutOrStdout(), resp.GetIntent())
		},
	}

	cmd.Flags().BoolVar(&req.SkipInitialWipe, "skip-wipe", false, "accept without the initial wipe (the machine holds nothing)")
	cmd.Flags().StringVar(&req.Ek, "ek", "",
		"the fingerprint (sha256:<hex>) of the TPM endorsement key the machine must prove: refused if its agent proved another, bound either way")

	return cmd
}

func newAllocateCommand(a *app) *cobra.Command {
	var (
		req        controlv1.AllocateRequest
		kernelArgs []string
		configFile string
	)

	cmd := &cobra.Command{
		Use:   "allocate <id>",
		Short: "Hand an accepted machine to Talos",
		Example: `  anvilctl machine allocate 4c4c4544-... --talos-version v1.9.0 \
    --extensions siderolabs/intel-ucode,siderolabs/iscsi-tools \
    --kernel-args console=ttyS0 --config controlplane.yaml

  # Which disk would Talos go to? Nothing is allocated.
  anvilctl machine allocate 4c4c4544-... --talos-version v1.9.0 \
    --install-disk 'type=nvme,size>=400GB,pick=smallest' --dry-run`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.MachineId = args[0]

			// One flag value may hold several args separated by spaces: no single kernel
			// arg contains one, and commas belong to args (console=ttyS0,115200n8).
			req.KernelArgs = nil
			for _, v := range kernelArgs {
				req.KernelArgs = append(req.KernelArgs, strings.Fields(v)...)
			}

			if configFile != "" {
				config, err := readConfig(cmd.InOrStdin(), configFile)
				if err != nil {
					return err
				}

				req.Config = config
			}

			c, err := a.transitions()
			if err != nil {
				return err
			}

			resp, err := c.Allocate(cmd.Context(), &req)
			if err != nil {
				return err
			}

			if req.GetDryRun() {
				_, err = fmt.Fprintln(cmd.OutOrStdout(), "dry run, nothing allocated: "+dryRunLine(resp.GetIntent()))

				return err
			}

			return printIntent(cmd.OutOrStdout(), resp.GetIntent())
		},
	}

	cmd.Flags().StringVar(&req.TalosVersion, "talos-version", "", "Talos version, v1.8.0 or later (required)")
	cmd.Flags().StringVar(&req.InstallDisk, "install-disk", "",
		"disk selector of the disk Talos installs to, resolved against the machine's inventory to exactly one disk "+
			"(e.g. 'type=nvme,size>=400GB,pick=smallest', 'serial=S64F...'); empty takes the provider's --install-disk")
	cmd.Flags().BoolVar(&req.DryRun, "dry-run", false, "check the request and show the install disk it resolves to, allocating nothing")
	cmd.Flags().StringSliceVar(&req.Extensions, "extensions", nil, "official system extensions, comma-separated (siderolabs/intel-ucode)")
	cmd.Flags().StringArrayVar(&kernelArgs, "kernel-args", nil, "extra kernel args, space-separated or repeated")
	cmd.Flags().StringVar(&configFile, "config", "", "Talos machine config file ('-' for stdin)")
	cmd.Flags().BoolVar(&req.NoDetectedExtensions, "no-detected-extensions", false,
		"leave out the extensions the machine's hardware calls for (the extensions catalog)")
	cmd.Flags().StringSliceVar(&req.ExcludeExtensions, "exclude-extensions", nil, "detected extensions to leave out, comma-separated")

	return cmd
}

func readConfig(stdin io.Reader, path string) ([]byte, error) {
	r := stdin

	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("error reading the machine config: %w", err)
		}

		defer f.Close()

		r = f
	}

	config, err := io.ReadAll(io.LimitReader(r, maxConfigRead))
	if err != nil {
		return nil, fmt.Errorf("error reading the machine config: %w", err)
	}

	return config, nil
}

var powerStates = map[string]controlv1.PowerState{
	"on":      controlv1.PowerState_POWER_STATE_ON,
	"off":     controlv1.PowerState_POWER_STATE_OFF,
	"default": controlv1.PowerState_POWER_STATE_DEFAULT,
}

func newPowerCommand(a *app) *cobra.Command {
	return &cobra.Command{
		Use:       "power on|off|default <id>",
		Short:     "Set the power state the provider keeps a machine in ('default': its policy)",
		Args:      cobra.ExactArgs(2),
		ValidArgs: []string{"on", "off", "default"},
		RunE: func(cmd *cobra.Command, args []string) error {
			power, ok := powerStates[args[0]]
			if !ok {
				return fmt.Errorf("power state %q is not one of on, off, default", args[0])
			}

			c, err := a.transitions()
			if err != nil {
				return err
			}

			resp, err := c.SetPower(cmd.Context(), &controlv1.SetPowerRequest{MachineId: args[1], Power: power})
			if err != nil {
				return err
			}

			return printIntent(cmd.OutOrStdout(), resp.GetIntent())
		},
	}
}

// dryRunLine says what an allocation would be.
func dryRunLine(in *controlv1.MachineIntent) string {
	a := in.GetAllocation()
	line := fmt.Sprintf("machine %s would boot Talos %s (schematic %s)", in.GetMachineId(), a.GetTalosVersion(), a.GetSchematicId())

	if d := a.GetInstallDisk(); d != nil {
		return line + fmt.Sprintf(", installed to %s, named %s in its config (selector %q)", d.GetDisk(), d.GetIdentity(), d.GetSelector())
	}

	return line + ", installed to the disk its config names"
}

// printIntent prints a one-line summary of a machine's intent after a transition.
func printIntent(w io.Writer, in *controlv1.MachineIntent) error {
	_, err := fmt.Fprintln(w, intentLine(in))

	return err
}

// intentLine summarises a machine's intent on one line.
func intentLine(in *controlv1.MachineIntent) string {
	parts := []string{strings.TrimPrefix(strings.ToLower(in.GetAcceptance().String()), "acceptance_")}

	if a := in.GetAllocation(); a != nil {
		parts = append(parts, fmt.Sprintf("allocated to Talos %s (allocation %s, schematic %s)", a.GetTalosVersion(), a.GetId(), a.GetSchematicId()))
	} else {
		parts = append(parts, "not allocated")
	}

	parts = append(parts, "power "+strings.TrimPrefix(strings.ToLower(in.GetPower().String()), "power_state_"))

	if in.GetCordoned() {
		parts = append(parts, "cordoned")
	}

	if m := in.GetWipeMode(); m != "" {
		parts = append(parts, "wipe mode "+m)
	}

	if m := in.GetKexecMode(); m != "" {
		parts = append(parts, "kexec "+m)
	}

	if d := in.GetAllocation().GetInstallDisk(); d != nil {
		parts = append(parts, "install disk "+d.GetDisk()+" ("+d.GetIdentity()+")")
	}

	if sc := in.GetWipeScope(); sc != "" {
		if k := in.GetWipeKeep(); k != "" {
			sc += " " + k
		}

		parts = append(parts, "wipe scope "+sc)
	}

	if ek := in.GetBoundEk(); ek != "" {
		parts = append(parts, "bound to TPM EK "+ek)
	}

	if d := in.GetAllocation().GetDetectedExtensions(); len(d) > 0 {
		parts = append(parts, "detected extensions "+strings.Join(d, ","))
	}

	return fmt.Sprintf("machine %s: %s", in.GetMachineId(), strings.Join(parts, ", "))
}

func newWipeModeCommand(a *app) *cobra.Command {
	cmd := newModeCommand(a, "wipe-mode", []string{"fast", "zeroes", "secure-erase"},
		func(ctx context.Context, c controlv1.TransitionServiceClient, id, mode string) (*controlv1.MachineIntent, error) {
			resp, err := c.SetWipeMode(ctx, &controlv1.SetWipeModeRequest{MachineId: id, Mode: mode})

			return resp.GetIntent(), err
		})
	cmd.Short = "Set how a machine's disks are wiped ('default': the provider's --wipe-mode)"

	return cmd
}

func newWipeScopeCommand(a *app) *cobra.Command {
	var keep string

	cmd := newModeCommand(a, "wipe-scope", []string{"all", "install-disk", "all-except"},
		func(ctx context.Context, c controlv1.TransitionServiceClient, id, scope string) (*controlv1.MachineIntent, error) {
			resp, err := c.SetWipeScope(ctx, &controlv1.SetWipeScopeRequest{MachineId: id, Scope: scope, Keep: keep})

			return resp.GetIntent(), err
		})
	cmd.Short = "Set which of a machine's disks its wipes touch ('default': the provider's --wipe-scope)"
	cmd.Long = `all wipes every disk a wipe may touch; install-disk wipes only the disk the machine last
installed to (its allocation's --install-disk); all-except keeps the disks --keep selects
(a disk selector) and wipes the rest. A kept disk is never opened for writing; the erase
report lists it with the reason.`
	cmd.Example = `  anvilctl machine wipe-scope all-except 4c4c4544-... --keep 'model=ST16000*'`
	cmd.Flags().StringVar(&keep, "keep", "", "with all-except: a disk selector of the disks to keep")

	return cmd
}

func newKexecModeCommand(a *app) *cobra.Command {
	cmd := newModeCommand(a, "kexec", []string{"auto", "always", "never"},
		func(ctx context.Context, c controlv1.TransitionServiceClient, id, mode string) (*controlv1.MachineIntent, error) {
			resp, err := c.SetKexecMode(ctx, &controlv1.SetKexecModeRequest{MachineId: id, Mode: mode})

			return resp.GetIntent(), err
		})
	cmd.Short = "Set how a machine is handed to Talos while its agent runs ('default': the provider's --kexec)"
	cmd.Long = `auto kexecs from the agent straight into Talos unless the machine's hardware is on the
kexec deny list; always kexecs whatever the list says; never boots Talos through the
firmware (the agent reboots, the firmware PXE-boots).`

	return cmd
}

// newModeCommand is "<name> <mode>|default <id>": a machine's own setting of one of the
// provider's modes, "default" (sent as "") following the provider's flag.
func newModeCommand(a *app, name string, modes []string,
	set func(ctx context.Context, c controlv1.TransitionServiceClient, id, mode string) (*controlv1.MachineIntent, error),
) *cobra.Command {
	return &cobra.Command{
		Use:       name + " " + strings.Join(modes, "|") + "|default <id>",
		Args:      cobra.ExactArgs(2),
		ValidArgs: append(slices.Clone(modes), "default"),
		RunE: func(cmd *cobra.Command, args []string) error {
			mode := args[0]
			if mode == "default" {
				mode = ""
			}

			c, err := a.transitions()
			if err != nil {
				return err
			}

			intent, err := set(cmd.Context(), c, args[1], mode)
			if err != nil {
				return err
			}

			return printIntent(cmd.OutOrStdout(), intent)
		},
	}
}
