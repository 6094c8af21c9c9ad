// Command lab runs the lab: a network of namespaces, the site DHCP server, the provider,
// QEMU machines that PXE-boot from it and, with --omni, a real Omni. See
// hack/internal/lab.
package main

import (
	"context"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/anvil-metal/anvil/hack/internal/lab"
	"github.com/anvil-metal/anvil/hack/internal/labnet"
	"github.com/anvil-metal/anvil/hack/internal/machine"
	"github.com/anvil-metal/anvil/internal/etcdtest"
	"github.com/anvil-metal/anvil/internal/flagenv"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCmd().ExecuteContext(ctx)

	stop()

	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func newRootCmd() *cobra.Command {
	var dir, prefix string

	root := &cobra.Command{
		Use:           "lab",
		Short:         "The Anvil lab: namespaces, site DHCP, the provider and QEMU machines",
		SilenceUsage:  true,
		SilenceErrors: true,
	}

	pf := root.PersistentFlags()
	pf.StringVar(&dir, "dir", "_out/lab", "directory of the lab's state, logs and machines")
	pf.StringVar(&prefix, "prefix", "anvil", "prefix of the lab's network namespaces (<prefix>-lab, <prefix>-site)")

	// Every flag can also come from ANVIL_<FLAG>.
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		return flagenv.Apply(cmd.Flags(), nil)
	}

	root.AddCommand(newUpCmd(&dir, &prefix), newDownCmd(&dir, &prefix), newStatusCmd(&dir), newMachineCmd(&dir), newProviderCmd(&dir),
		newOmnictlCmd(&dir), newConsoleCmd(&dir))
	annotate(root)

	return root
}

// annotate names each flag's variable in its usage, on every command (lab machine add's
// too); the root's persistent flags once.
func annotate(cmd *cobra.Command) {
	flagenv.Annotate(cmd.LocalNonPersistentFlags())

	if !cmd.HasParent() {
		flagenv.Annotate(cmd.PersistentFlags())
	}

	for _, c := range cmd.Commands() {
		annotate(c)
	}
}

func newUpCmd(dir, prefix *string) *cobra.Command {
	var (
		cfg       lab.Config
		firmware  []string
		bmcs      []string
		elsewhere []string
		factory   bool
		omni      bool
		ha        bool
	)

	cmd := &cobra.Command{
		Use:   "up",
		Short: "Create the network, start dnsmasq, the provider and the machines",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Dir, cfg.Prefix = *dir, *prefix

			for _, f := range firmware {
				fw, err := machine.ParseFirmware(f)
				if err != nil {
					return err
				}

				cfg.Firmware = append(cfg.Firmware, fw)
			}

			for _, b := range bmcs {
				owner, err := lab.ParsePowerOwner(b)
				if err != nil {
					return err
				}

				cfg.BMC = append(cfg.BMC, owner)
			}

			for _, b := range elsewhere {
				owner, err := lab.ParsePowerOwner(b)
				if err != nil {
					return fmt.Errorf("--bmc-elsewhere: %w", err)
				}

				if owner == lab.OwnerNone {
					return fmt.Errorf("--bmc-elsewhere: a machine whose power owner is none has no BMC to give")
				}

				cfg.UnregisteredBMC = append(cfg.UnregisteredBMC, owner)
			}

			if err := buildPower(cmd.Context(), cfg); err != nil {
				return err
			}

			if !factory {
				cfg.FactoryBin = ""
			} else if err := buildFactory(cmd.Context(), cfg); err != nil {
				return err
			}

			if !omni {
				cfg.OmniBin = ""
			}

			if ha {
				cfg.Replicas = labnet.MaxReplicas

				if _, err := os.Stat(etcdtest.Binary("")); err != nil {
					return fmt.Errorf("--ha runs etcd, which make envtest-assets builds: %w", err)
				}
			}

			s, err := lab.Up(cmd.Context(), cfg)
			if err != nil {
				return fmt.Errorf("%w (lab down removes what was started)", err)
			}

			if err := s.WriteStatus(cmd.OutOrStdout()); err != nil {
				return err
			}

			return writeGiveBMCs(cmd.OutOrStdout(), s)
		},
	}

	f := cmd.Flags()
	f.IntVar(&cfg.Machines, "machines", 3, "number of machines")
	f.StringSliceVar(&firmware, "firmware", []string{"bios", "uefi", "uefi-pxe"}, "firmware of the machines, in turn: bios, uefi (OVMF + iPXE ROM), uefi-pxe (OVMF's own PXE), uefi-http (OVMF's UEFI HTTP boot), arm64 (AAVMF's UEFI HTTP boot of the UKI Anvil builds; make agent-arm64)")
	f.IntSliceVar(&cfg.NICs, "nics", nil, "network ports of the machines, in turn (default 1 each); a machine with more boots from its last")
	f.BoolSliceVar(&cfg.TPM, "tpm", nil, "which machines have a TPM 2.0, in turn (swtpm; its state, hence its EK, kept in the machine's directory): --tpm true, or --tpm true,false")
	f.BoolVar(&ha, "ha", false, "a site of 3 provider replicas on a 3-member etcd cluster, each in a namespace of its own, behind the site's address "+labnet.VIP+" that keepalived moves to a ready one")
	f.BoolVar(&cfg.FullDHCP, "full-dhcp", false, "a site without a DHCP server: the provider hands out the addresses (full DHCP mode)")
	f.BoolVar(&cfg.IPv6Only, "ipv6-only", false, "an IPv6-only provisioning network: the provider serves DHCPv6 and advertises fd77::1")
	f.BoolVar(&cfg.KVM, "kvm", false, "use KVM instead of TCG (only where KVM really works; not under kvm-pvm)")
	f.IntVar(&cfg.MemoryMB, "memory", 1024, "memory of each machine, MiB")
	f.IntVar(&cfg.CPUs, "cpus", 0, "virtual CPUs of each machine (0: 2); real Talos under TCG wants 1: with 2 its kernel's text patching sometimes panics it")
	f.StringVar(&cfg.DiskSize, "disk-size", "8G", "size of each machine's qcow2 disk")
	f.StringVar(&cfg.ProviderBin, "provider-bin", "_out/bin/provider", "provider binary")
	f.StringVar(&cfg.AgentAssetsDir, "agent-assets-dir", "_out/agent", "the agent's boot assets (make agent-initramfs)")
	f.StringVar(&cfg.FactoryURL, "image-factory-base-url", "http://10.77.0.1:8080", "Image Factory (or stand-in) base URL given to the provider")
	f.StringVar(&cfg.FactoryPXEURL, "image-factory-pxe-base-url", "http://10.77.0.1:8080", "Image Factory PXE base URL given to the provider")
	f.IntVar(&cfg.APIPort, "api-port", 50042, "the provider's API port")
	f.BoolVar(&factory, "factory", true, "run the Image Factory stand-in on 10.77.0.1:8080 (built from hack/cmd/lab-factory and hack/cmd/talos-standin when missing)")
	f.StringVar(&cfg.FactoryBin, "factory-bin", "_out/bin/lab-factory", "the Image Factory stand-in's binary")
	f.StringVar(&cfg.FactoryAssetsDir, "factory-assets-dir", "_out/talos-standin", "the stand-in Talos boot assets the factory serves (empty: none)")
	f.StringVar(&cfg.TalosAssetsDir, "talos-assets-dir", "", "real Talos (make talos: _out/talos/assets), served by the factory for its version beside the stand-in's (empty: none)")
	f.StringArrayVar(&cfg.ProviderArgs, "provider-arg", nil, "extra provider argument (repeatable)")
	f.StringSliceVar(&bmcs, "bmc", []string{"api"}, "power owner of the machines, in turn: api (the lab's power API), ipmi (a simulated IPMI BMC, ipmi_sim, of its own) or none")
	f.StringSliceVar(&elsewhere, "bmc-elsewhere", nil, "power owners (api, ipmi) whose BMCs the lab does not give the provider: a user gives them (anvilctl machine bmc set, Omni's InfraMachineBMCConfig; up prints how)")
	f.StringVar(&cfg.PowerBin, "power-bin", "_out/bin/lab-power", "the power API daemon and simulated BMCs' chassis program (built from hack/cmd/lab-power when missing)")
	f.BoolVar(&omni, "omni", false, "run a real Omni in namespace <prefix>-omni on 10.77.0.3, with the factory stand-in's Talos and Kubernetes versions (make omni builds it)")
	f.StringVar(&cfg.OmniBin, "omni-bin", "_out/bin/omni", "the Omni binary (make omni)")
	f.StringVar(&cfg.OmnictlBin, "omnictl-bin", "_out/bin/omnictl", "omnictl (make omni): creates the provider's infra provider in the lab's Omni")

	return cmd
}

// buildFactory builds the factory stand-in and its boot assets when they are missing,
// from the module in the working directory; without an assets directory, the stand-in
// only (it then boots nothing: schematics and versions, for Omni).
func buildFactory(ctx context.Context, cfg lab.Config) error {
	if _, err := os.Stat(cfg.FactoryBin); err != nil {
		if err := lab.BuildFactory(ctx, ".", cfg.FactoryBin); err != nil {
			return err
		}
	}

	if cfg.FactoryAssetsDir == "" {
		return nil
	}

	return lab.BuildStandinAssets(ctx, ".", cfg.FactoryAssetsDir)
}

// buildPower builds lab-power when missing, from the module in the working directory.
func buildPower(ctx context.Context, cfg lab.Config) error {
	if _, err := os.Stat(cfg.PowerBin); err == nil {
		return nil
	}

	return lab.BuildPower(ctx, ".", cfg.PowerBin)
}

func newDownCmd(dir, prefix *string) *cobra.Command {
	return &cobra.Command{
		Use:   "down",
		Short: "Stop everything the lab started and remove its namespaces",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return lab.Down(cmd.Context(), *dir, *prefix)
		},
	}
}

func newStatusCmd(dir *string) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Print what the lab runs",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := lab.Load(*dir)
			if err != nil {
				return fmt.Errorf("no lab in %s: %w", *dir, err)
			}

			return s.WriteStatus(cmd.OutOrStdout())
		},
	}
}

func newConsoleCmd(dir *string) *cobra.Command {
	listen := "127.0.0.1:50043"

	cmd := &cobra.Command{
		Use:   "console",
		Short: "Reach the provider's web console from this host (a forwarder into the lab's namespace) until interrupted",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := lab.Load(*dir)
			if err != nil {
				return fmt.Errorf("no lab in %s: %w", *dir, err)
			}

			lis, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("error listening on %s: %w", listen, err)
			}

			fmt.Fprintf(cmd.OutOrStdout(), "The console: https://%s/ui/ (its certificate is the lab provider's CA's: %s)\n"+
				"Log in with the token in %s\nCtrl-C stops the forwarder; the lab keeps running.\n",
				lis.Addr(), filepath.Join(s.ProviderStateDir(), "ca.crt"), filepath.Join(s.ProviderStateDir(), "ui-token"))

			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()

			return labnet.Forward(ctx, lis, s.ProviderNS, net.JoinHostPort(labnet.ProviderAddr, "50043"), log.Printf)
		},
	}

	cmd.Flags().StringVar(&listen, "listen", listen, "host:port on this host the console is reached at")

	return cmd
}

func newOmnictlCmd(dir *string) *cobra.Command {
	var bin string

	cmd := &cobra.Command{
		Use:   "omnictl [-- <omnictl arguments>...]",
		Short: "Run omnictl against the lab's Omni as its administrator (from Omni's namespace, the lab CA trusted)",
		Example: "  lab omnictl -- get machines\n" +
			"  lab omnictl -- infraprovider create anvil\n" +
			"  lab omnictl -- get providerjoinconfigs -n infra-provider -o yaml",
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := lab.Load(*dir)
			if err != nil {
				return fmt.Errorf("no lab in %s: %w", *dir, err)
			}

			client, err := s.OmniClient(bin)
			if err != nil {
				return err
			}

			c, err := client.Command(cmd.Context(), args...)
			if err != nil {
				return err
			}

			c.Stdin, c.Stdout, c.Stderr = cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr()

			return c.Run()
		},
	}

	cmd.Flags().StringVar(&bin, "omnictl-bin", "_out/bin/omnictl", "the omnictl binary (make omni)")

	return cmd
}
