package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/anvil-metal/anvil/imager/internal/talosbuild"
	"github.com/anvil-metal/anvil/internal/flagenv"
)

// newTalosCommand is "imager talos": real Talos boot assets for the lab (make talos).
// Its flags are prefixed (--talos-out) so that their ANVIL_ variables do not collide
// with the agent's.
func newTalosCommand() *cobra.Command {
	var (
		opts  talosbuild.Options
		mtime string
	)

	cmd := &cobra.Command{
		Use:   "talos",
		Short: "Build real Talos boot assets and its installer's base layer from Talos' programs and Debian's packages",
		Long: "Build real Talos boot assets for the lab, without Docker: Talos' programs built from its Go module\n" +
			"(make talos-bins), Debian's kernel and userland (hack/talos-debian.sh), assembled as Talos' rootfs\n" +
			"squashfs in an initramfs, and the installer image's base layer. See imager/README.md.",
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			return flagenv.Apply(cmd.Flags(), nil)
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			for flag, v := range map[string]string{
				"talos-version": opts.TalosVersion, "talos-bins": opts.Bins, "talos-preinit": opts.Preinit,
				"talos-debian": opts.Debian, "talos-source": opts.TalosSource, "machinery-source": opts.MachinerySource,
			} {
				if v == "" {
					return fmt.Errorf("--%s is required", flag)
				}
			}

			created, err := sourceTime(mtime)
			if err != nil {
				return err
			}

			opts.MTime, opts.Log = created, cmd.ErrOrStderr()

			m, err := talosbuild.Build(cmd.Context(), opts)
			if err != nil {
				return err
			}

			fmt.Fprintf(cmd.OutOrStdout(), "Talos %s on Linux %s in %s: initramfs sha256 %s\n",
				m.TalosVersion, m.KernelVersion, opts.Out, m.Files[talosbuild.InitramfsFile])

			return nil
		},
	}

	flags := cmd.Flags()
	flags.StringVar(&opts.TalosVersion, "talos-version", "", "the version of the Talos module the programs were built from")
	flags.StringVar(&opts.Bins, "talos-bins", "", "directory of machined, init, installer, containerd and containerd-shim-runc-v2")
	flags.StringVar(&opts.Preinit, "talos-preinit", "", "the initramfs' /init, which loads the kernel's modules (hack/cmd/talos-preinit, static)")
	flags.StringVar(&opts.Debian, "talos-debian", "", "the unpacked Debian packages (hack/talos-debian.sh's directory)")
	flags.StringVar(&opts.TalosSource, "talos-source", "", "the Talos module's directory (go list -m -f '{{.Dir}}' github.com/siderolabs/talos)")
	flags.StringVar(&opts.MachinerySource, "machinery-source", "", "the Talos machinery module's directory")
	flags.StringVar(&opts.Out, "talos-out", "_out/talos/assets", "output directory")
	flags.StringVar(&mtime, "mtime", "", "time of every file in the images, seconds since the epoch (default: $SOURCE_DATE_EPOCH, else 0)")
	flagenv.Annotate(flags)

	return cmd
}
