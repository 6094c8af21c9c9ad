// Command metal-agent is the metal agent: PID 1 of the initramfs that machines unknown to
// the provider boot. It reports what the machine is and carries out the provider's
// orders. Outside an initramfs it runs as an ordinary process, for tests and fixtures,
// and with --mode=extension as a Talos system extension service (Talos does PID 1).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/anvil-metal/anvil/agent/internal/inventory"
	"github.com/anvil-metal/anvil/agent/internal/service"
	"github.com/anvil-metal/anvil/internal/flagenv"
	"github.com/anvil-metal/anvil/internal/initsys"
)

func main() {
	// A Talos extension service is PID 1 of its own PID namespace too: only its
	// arguments tell it from the initramfs' init, which the kernel starts without any.
	if initsys.IsPID1() && !extensionRequested(os.Args[1:], os.Getenv) {
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
		mode       string
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

			var err error

			if opts.Mode, err = service.ParseMode(mode); err != nil {
				return err
			}

			// Under Talos the agent reads the machine as PID 1 does, device nodes too
			// (a CD-ROM's media).
			if opts.Mode == service.ModeExtension && opts.Sources.DevRoot == "" {
				opts.Sources.DevRoot = "/dev"
			}

			opts.Logger = initsys.NewLogger(level, os.Stderr)

			if smbiosFile != "" {
				opts.Sources.SMBIOS = inventory.SMBIOSFile(smbiosFile)
			}

			return service.Run(cmd.Context(), opts)
		},
	}

	f := cmd.Flags()
	f.StringVar(&mode, "mode", string(service.ModeInitramfs), "initramfs, or extension: a Talos system extension service, Talos doing PID 1, network, SideroLink and the maintenance API")
	f.StringVar(&opts.Config.Provider, "provider", "", "provider API endpoint host:port (default: anvil.provider= on the kernel cmdline)")
	f.StringVar(&opts.Config.CAFingerprint, "ca-fingerprint", "", "SHA-256 of the provider's CA certificate (default: anvil.ca=)")
	f.StringVar(&opts.Config.MachineID, "machine-id", "", "the machine's ID (default: anvil.machine=)")
	f.StringVar(&opts.Config.Token, "token", "", "the per-boot token (default: anvil.token=; prefer the environment variable)")
	f.StringVar(&opts.Sources.SysfsRoot, "sysfs-root", "", "sysfs to read the hardware from (default /sys)")
	f.StringVar(&opts.Sources.ProcRoot, "proc-root", "", "procfs to read the cmdline and mounts from (default /proc)")
	f.StringVar(&smbiosFile, "smbios-file", "", "SMBIOS dump to read instead of the firmware's")
	f.BoolVar(&opts.Modules, "load-modules", false, "load kernel modules for the hardware found")
	f.BoolVar(&opts.Network, "configure-network", false, "bring up physical links with DHCP")
	f.BoolVar(&opts.DryRun, "dry-run", true, "log reboots, power-offs and kexecs instead of doing them")
	f.StringVar(&opts.MachinedSocket, "machined-socket", "", "Talos' machined API socket, through which extension mode reboots and powers off (default "+constants.MachineSocketPath+")")
	f.BoolVar(&debug, "debug", false, "log at debug level")

	flagenv.Annotate(f)

	return cmd
}

// extensionRequested tells whether the agent is to run in extension mode, before its
// flags are parsed: --mode=extension, --mode extension, or ANVIL_MODE=extension.
func extensionRequested(args []string, getenv func(string) string) bool {
	for i, a := range args {
		switch {
		case a == "--":
			return false
		case a == "--mode="+string(service.ModeExtension):
			return true
		case a == "--mode" && i+1 < len(args):
			return args[i+1] == string(service.ModeExtension)
		case strings.HasPrefix(a, "--mode="):
			return false
		}
	}

	return getenv(flagenv.Name("mode")) == string(service.ModeExtension)
}
