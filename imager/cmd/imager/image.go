package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/anvil-metal/anvil/imager/internal/providerimage"
	"github.com/anvil-metal/anvil/internal/flagenv"
)

// newImageCommand is "imager image": the provider's OCI image. Its flags are named apart
// from the boot assets' and the provider's own (--provider-bin, --image-out), so that
// their ANVIL_ variables mean one thing.
func newImageCommand() *cobra.Command {
	var (
		opts                      providerimage.Options
		out, tarball, push, mtime string
		insecure                  bool
	)

	cmd := &cobra.Command{
		Use:   "image",
		Short: "Build the provider's OCI image (provider, Omni adapter, iPXE, agent boot assets): an OCI image layout, pushed if asked",
		Long: "Build the provider's OCI image reproducibly, without Docker: the same inputs, version and time give\n" +
			"the same digest, printed on stdout. It runs as uid " + fmt.Sprint(providerimage.UID) + "; the provider binary carries the\n" +
			"capabilities it needs as that user (" + strings.Join(providerimage.Capabilities, ", ") + "), which the container must be granted.",
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			return flagenv.Apply(cmd.Flags(), nil)
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			created, err := sourceTime(mtime)
			if err != nil {
				return err
			}

			opts.Created = created

			img, err := providerimage.Build(cmd.Context(), opts)
			if err != nil {
				return err
			}

			return publish(cmd, img, "the provider image "+opts.Version, opts.Version, out, push, insecure, func() error {
				if tarball == "" {
					return nil
				}

				if err := providerimage.WriteTarball(tarball, img, opts.Version); err != nil {
					return err
				}

				fmt.Fprintf(cmd.ErrOrStderr(), "imager: and to %s (docker load: %s:%s)\n", tarball, providerimage.TarballRepository, opts.Version)

				return nil
			})
		},
	}

	flags := cmd.Flags()
	flags.StringVar(&opts.Provider, "provider-bin", "", "the provider binary (static: CGO_ENABLED=0), the image's entrypoint")
	flags.StringVar(&opts.OmniAdapter, "omni-adapter-bin", "", "the Omni adapter binary (static), beside the provider")
	flags.StringVar(&opts.AgentAssets, "agent-assets", "_out/agent", "directory of the agent's boot assets (make agent-initramfs)")
	flags.StringVar(&opts.IPXEDir, "ipxe-dir", providerimage.DefaultIPXEDir, "directory of the iPXE binaries (Debian's ipxe package)")
	flags.StringSliceVar(&opts.IPXEFiles, "ipxe-files", providerimage.DefaultIPXEFiles, "iPXE binaries to ship, served over TFTP")
	flags.StringVar(&opts.CABundle, "ca-bundle", providerimage.DefaultCABundle, "PEM bundle of trusted CAs (Debian's ca-certificates)")
	flags.StringVar(&opts.Arch, "arch", "amd64", "architecture of the binaries and the image: amd64 or arm64")
	flags.StringVar(&mtime, "mtime", "", "the image's creation time and every file's mtime, seconds since the epoch (default: $SOURCE_DATE_EPOCH, else 0)")
	flags.StringVar(&opts.Version, "image-version", "dev", "the image's version label, and the layout's tag")
	flags.StringVar(&opts.Revision, "image-revision", "", "the image's revision label: the source's commit")
	flags.StringVar(&out, "image-out", "_out/image", "OCI image layout directory to write (replaced whole)")
	flags.StringVar(&tarball, "image-tarball", "", "also write the image as a tarball docker load and podman load read")
	flags.StringVar(&push, "image-push", "", "also push the image to this reference, registry/repository:tag")
	flags.BoolVar(&insecure, "image-insecure", false, "push over plain HTTP (a registry without TLS)")
	flagenv.Annotate(flags)

	return cmd
}
