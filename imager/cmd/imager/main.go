// Command imager builds the metal agent's boot assets: vmlinuz-<arch>, initramfs-<arch>.xz
// (or .zst), cmdline-<arch> and, given a systemd-boot stub, agent-<arch>.efi (a Unified
// Kernel Image), with Go alone; "imager extension" builds the agent's Talos system
// extension image. Every flag can also be set as ANVIL_<FLAG>.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/anvil-metal/anvil/imager/internal/bootassets"
	"github.com/anvil-metal/anvil/imager/internal/kmod"
	"github.com/anvil-metal/anvil/internal/flagenv"
	"github.com/anvil-metal/anvil/internal/initramfs"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if err := newCommand().ExecuteContext(ctx); err != nil {
		os.Exit(1)
	}
}

func newCommand() *cobra.Command {
	var (
		opts               bootassets.Options
		kernel, modulesDir string
		kernelRoot         string
		compression, mtime string
	)

	cmd := &cobra.Command{
		Use:          "imager",
		Short:        "Build the metal agent's boot assets (kernel, initramfs, cmdline)",
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			return flagenv.Apply(cmd.Flags(), nil)
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error

			if opts.Agent == "" {
				return fmt.Errorf("--agent is required: the metal-agent binary to ship as /init")
			}

			if opts.Compression, err = initramfs.ParseCompression(compression); err != nil {
				return err
			}

			if opts.MTime, err = sourceDate(mtime); err != nil {
				return err
			}

			if opts.Arch != "amd64" && opts.Arch != "arm64" {
				return fmt.Errorf("invalid --arch %q: amd64 or arm64", opts.Arch)
			}

			if opts.Cmdline == "" {
				opts.Cmdline = bootassets.Cmdline(opts.Arch)
			}

			if opts.Kernel, err = bootassets.FindKernel(kernelRoot, kernel, modulesDir); err != nil {
				return err
			}

			opts.Log = cmd.ErrOrStderr()

			_, err = bootassets.Build(cmd.Context(), opts)

			return err
		},
	}

	flags := cmd.Flags()
	flags.StringVar(&opts.Agent, "agent", "", "metal-agent binary (static), shipped as /init")
	flags.StringVar(&kernel, "kernel", "", "kernel image (default: <kernel-root>/boot/vmlinuz-<v> of the newest <kernel-root>/lib/modules/<v>)")
	flags.StringVar(&modulesDir, "modules-dir", "", "the kernel's modules tree (default: <kernel-root>/lib/modules/<version of --kernel>)")
	flags.StringVar(&kernelRoot, "kernel-root", "/", "tree holding boot/vmlinuz-<v> and lib/modules/<v>, e.g. an extracted arm64 linux-image .deb")
	flags.StringVar(&opts.UKIStub, "uki-stub", "", "systemd-boot EFI stub (linuxaa64.efi.stub); if set, also write agent-<arch>.efi, a Unified Kernel Image")
	flags.StringVar(&opts.FirmwareDir, "firmware-dir", "_out/firmware", "firmware tree laid out like /lib/firmware (hack/firmware.sh makes it)")
	flags.StringSliceVar(&opts.Modules, "modules", kmod.DefaultPatterns, "module name globs (or path prefixes with '/') to ship, with their dependencies")
	flags.StringVar(&opts.OutDir, "out", "_out/agent", "output directory")
	flags.StringVar(&opts.Arch, "arch", "amd64", "architecture of the kernel and agent, amd64 or arm64; suffix of the output files")
	flags.StringVar(&compression, "compression", string(initramfs.Zstd), "initramfs compression: zstd or xz")
	flags.IntVar(&opts.ZstdLevel, "zstd-level", 19, "zstd level, 1-22 (mapped to the encoder's fastest/default/better/best)")
	flags.StringVar(&opts.Cmdline, "cmdline", "", "kernel command line written to cmdline-<arch> (default: \""+bootassets.DefaultCmdline+"\", ttyAMA0 instead of ttyS0 for arm64)")
	flags.StringVar(&mtime, "mtime", "", "mtime of archive entries, seconds since the epoch (default: $SOURCE_DATE_EPOCH, else 0)")
	flags.BoolVar(&opts.Force, "force", false, "recompress even when the archive is unchanged since the last build")
	flagenv.Annotate(flags)

	cmd.AddCommand(newExtensionCommand(), newImageCommand(), newCAPIReleaseCommand(), newTalosCommand())

	return cmd
}

// sourceTime is sourceDate as a time: what an image says it was created at.
func sourceTime(mtime string) (time.Time, error) {
	epoch, err := sourceDate(mtime)
	if err != nil {
		return time.Time{}, err
	}

	return time.Unix(int64(epoch), 0).UTC(), nil //nolint:gosec // parsed into 32 bits
}

// sourceDate reads --mtime, else SOURCE_DATE_EPOCH (the reproducible-builds convention),
// else 0: seconds since the epoch.
func sourceDate(mtime string) (uint64, error) {
	if mtime == "" {
		mtime = os.Getenv("SOURCE_DATE_EPOCH")
	}

	if mtime == "" {
		return 0, nil
	}

	v, err := strconv.ParseUint(mtime, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("invalid --mtime %q: %w", mtime, err)
	}

	return v, nil
}
