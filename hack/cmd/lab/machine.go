package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/anvil-metal/anvil/hack/internal/lab"
	"github.com/anvil-metal/anvil/hack/internal/machine"
)

func newMachineCmd(dir *string) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "machine",
		Short: "The lab's machines: add one to a running lab, power them (start, stop, reset; through a simulated BMC when they have one), say how to give a BMC",
	}

	actions := map[string]func(lab.Power, context.Context) error{
		"start": lab.Power.Start,
		"stop":  lab.Power.Stop,
		"reset": lab.Power.Reset,
	}

	for _, name := range []string{"start", "stop", "reset"} {
		action := actions[name]

		cmd.AddCommand(&cobra.Command{
			Use:   name + " <machine>...",
			Short: strings.ToUpper(name[:1]) + name[1:] + " machines (by name, UUID or MAC)",
			Args:  cobra.MinimumNArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				s, err := lab.Load(*dir)
				if err != nil {
					return fmt.Errorf("no lab in %s: %w", *dir, err)
				}

				for _, a := range args {
					m, err := s.Machine(a)
					if err != nil {
						return err
					}

					// One power owner per machine: a simulated BMC's machine is powered
					// through that BMC.
					if err := action(s.Power(m), cmd.Context()); err != nil {
						return err
					}
				}

				return nil
			},
		})
	}

	cmd.AddCommand(newMachineAddCmd(dir), newMachineBMCCmd(dir))

	return cmd
}

func newMachineAddCmd(dir *string) *cobra.Command {
	var (
		mc       lab.MachineConfig
		firmware string
		owner    string
		register bool
	)

	cmd := &cobra.Command{
		Use:   "add",
		Short: "Add a machine to the running lab and power it on: its disk, its power owner, its BMC given to the provider (unless --register-bmc=false)",
		Example: "  lab machine add --firmware uefi --memory 2048\n" +
			"  lab machine add --tpm                             # a machine with a TPM 2.0 (swtpm)\n" +
			"  lab machine add --bmc ipmi --register-bmc=false   # prints how to give its BMC (anvilctl, Omni)",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error

			if mc.Firmware, err = machine.ParseFirmware(firmware); err != nil {
				return err
			}

			if mc.BMC, err = lab.ParsePowerOwner(owner); err != nil {
				return err
			}

			if !register && mc.BMC == lab.OwnerNone {
				return errors.New("--register-bmc=false: a machine whose power owner is none has no BMC to give")
			}

			mc.BMCElsewhere = !register

			s, err := lab.Load(*dir)
			if err != nil {
				return fmt.Errorf("no lab in %s (lab up first): %w", *dir, err)
			}

			m, err := s.AddMachine(cmd.Context(), mc)
			if err != nil {
				return err
			}

			out := cmd.OutOrStdout()

			if err := s.WriteMachineStatus(out, m); err != nil {
				return err
			}

			if mc.BMC == lab.OwnerNone {
				return nil
			}

			if register {
				_, err := fmt.Fprintf(out, "its BMC is given to the provider (anvilctl get bmc %s)\n", m.UUID)

				return err
			}

			fmt.Fprintln(out, "its BMC is not given to the provider; give it as a user does:")

			return s.WriteGiveBMC(out, m)
		},
	}

	f := cmd.Flags()
	f.StringVar(&firmware, "firmware", "bios", "firmware: bios, uefi, uefi-pxe, uefi-http or arm64")
	f.StringVar(&owner, "bmc", "api", "power owner: api (the lab's power API), ipmi (a simulated IPMI BMC of its own) or none")
	f.BoolVar(&register, "register-bmc", true, "give the provider the machine's BMC; false: a user gives it (anvilctl machine bmc set, Omni's InfraMachineBMCConfig), and this prints how")
	f.IntVar(&mc.MemoryMB, "memory", 0, "memory, MiB (0: the lab's, lab up --memory; real Talos wants 2048)")
	f.IntVar(&mc.CPUs, "cpus", 0, "virtual CPUs (0: the lab's, lab up --cpus; real Talos under TCG wants 1)")
	f.StringVar(&mc.DiskSize, "disk-size", "", "size of its qcow2 disk (empty: the lab's, lab up --disk-size)")
	f.IntVar(&mc.NICs, "nics", 1, fmt.Sprintf("network ports (1 to %d; it boots from the last)", machine.MaxNICs))
	f.BoolVar(&mc.TPM, "tpm", false, "give it a TPM 2.0 (swtpm; its state, hence its EK, kept in the machine's directory)")

	return cmd
}

func newMachineBMCCmd(dir *string) *cobra.Command {
	return &cobra.Command{
		Use:   "bmc <machine>...",
		Short: "Say how to give machines' BMCs to the provider as a user does (anvilctl, Omni): address, port, user, the password's file",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := lab.Load(*dir)
			if err != nil {
				return fmt.Errorf("no lab in %s: %w", *dir, err)
			}

			for _, a := range args {
				m, err := s.Machine(a)
				if err != nil {
					return err
				}

				if err := s.WriteGiveBMC(cmd.OutOrStdout(), m); err != nil {
					return err
				}
			}

			return nil
		},
	}
}

// writeGiveBMCs says how to give the BMCs the lab does not give the provider.
func writeGiveBMCs(w io.Writer, s *lab.State) error {
	header := "\nBMCs the lab does not give the provider (lab up --bmc-elsewhere); give them as a user does:\n"

	for _, m := range s.MachineList() {
		if !s.BMC(m.Name).Elsewhere {
			continue
		}

		if _, err := io.WriteString(w, header); err != nil {
			return err
		}

		header = ""

		if err := s.WriteGiveBMC(w, m); err != nil {
			return err
		}
	}

	return nil
}
