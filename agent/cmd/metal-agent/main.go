// Command metal-agent is the metal agent: PID 1 of the initramfs that machines unknown to
// the provider boot. It reports what the machine is and carries out the provider's
// orders. Outside an initramfs it runs as an ordinary process, for tests and fixtures.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/anvil-metal/anvil/agent/internal/inventory"
	"github.com/anvil-metal/anvil/agent/internal/service"
	"github.com/anvil-metal/anvil/internal/flagenv"
	"github.com/anvil-metal/anvil/internal/initsys"
)

func main() {
	if initsys.IsPID1() {
		runPID1()
	}

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()

	if err := newRootCmd().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "metal-agent:", err)
		os.Exit(1)
	}
}

// runPID1 runs the agent as init: it never returns, since PID 1 exiting is a kernel
// panic; on a fatal error it waits, then reboots, so the machine PXE-boots again.
func runPID1() {
	pid1 := initsys.Start(zapcore.InfoLevel)
	logger := pid1.Logger

	err := initsys.Guard(logger, func() error {
		return service.Run(context.Background(), service.Options{
			PID1: true, Modules: true, Network: true, Sources: inventory.DefaultSources(), Logger: logger,
		})
	})

	logger.Error("the agent stopped; rebooting in 60 s", zap.Error(err))
	time.Sleep(time.Minute)

	initsys.Halt(logger, initsys.Reboot)
}

func newRootCmd() *cobra.Command {
	var (
		opts       service.Options
		smbiosFile string
		debug      bool
	)

	cmd := &cobra.Command{
		Use:           "metal-agent",
		Short:         "Anvil's metal agent, run outside an initramfs (as PID 1 it takes no flags)",
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			return flagenv.Apply(cmd.Flags(), nil)
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			level := zapcore.InfoLevel
			if debug {
				level = zapcore.DebugLevel
			}

			opts.Logger = initsys.NewLogger(level, os.Stderr)

			if smbiosFile != "" {
				opts.Sources.SMBIOS = inventory.SMBIOSFile(smbiosFile)
			}

			return service.Run(cmd.Context(), opts)
		},
	}

	f := cmd.Flags()
	f.StringVar(&opts.Config.Provider, "provider", "", "provider API endpoint host:port (default: anvil.provider= on the kernel cmdline)")
	f.StringVar(&opts.Config.CAFingerprint, "ca-fingerprint", "", "SHA-256 of the provider's CA certificate (default: anvil.ca=)")
	f.StringVar(&opts.Config.MachineID, "machine-id", "", "the machine's ID (default: anvil.machine=)")
	f.StringVar(&opts.Config.Token, "token", "", "the per-boot token (default: anvil.token=; prefer the environment variable)")
	f.StringVar(&opts.Sources.SysfsRoot, "sysfs-root", "", "sysfs to read the hardware from (default /sys)")
	f.StringVar(&opts.Sources.ProcRoot, "proc-root", "", "procfs to read the cmdline from (default /proc)")
	f.StringVar(&smbiosFile, "smbios-file", "", "SMBIOS dump to read instead of the firmware's")
	f.BoolVar(&opts.Modules, "load-modules", false, "load kernel modules for the hardware found")
	f.BoolVar(&opts.Network, "configure-network", false, "bring up physical links with DHCP")
	f.BoolVar(&opts.DryRun, "dry-run", true, "log reboots, power-offs and kexecs instead of doing them")
	f.BoolVar(&debug, "debug", false, "log at debug level")

	flagenv.Annotate(f)

	return cmd
}
