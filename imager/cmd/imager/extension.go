package main

import (
	"fmt"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/anvil-metal/anvil/imager/internal/ociimage"

	"github.com/spf13/cobra"

	"github.com/anvil-metal/anvil/imager/internal/extension"
	"github.com/anvil-metal/anvil/internal/flagenv"
)

// newExtensionCommand is "imager extension": the agent as a Talos system extension image.
// Its flags are prefixed (--extension-out, not --out) so that their ANVIL_ variables do
// not collide with the boot assets'.
func newExtensionCommand() *cobra.Command {
	var (
		opts             extension.Options
		out, push, mtime string
		insecure         bool
	)

	cmd := &cobra.Command{
		Use:   "extension",
		Short: "Build the metal agent as a Talos system extension (" + extension.Name + "): an OCI image layout, pushed if asked",
		Long: "Build the metal agent as a Talos system extension named " + extension.Name + ", reproducibly: the same\n" +
			"agent, version and time give the same digest, printed on stdout.",
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			return flagenv.Apply(cmd.Flags(), nil)
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.Agent == "" {
				return fmt.Errorf("--agent is required: the static metal-agent binary")
			}

			created, err := sourceTime(mtime)
			if err != nil {
				return err
			}

			opts.Created = created

			img, err := extension.Build(cmd.Context(), opts)
			if err != nil {
				return err
			}

			return publish(cmd, img, extension.Name+" "+opts.Version, opts.Version, out, push, insecure, nil)
		},
	}

	flags := cmd.Flags()
	flags.StringVar(&opts.Agent, "agent", "", "metal-agent binary (static), the extension service's entrypoint")
	flags.StringVar(&opts.Version, "extension-version", "dev", "the extension's version in its manifest, and the layout's tag")
	flags.StringVar(&opts.Arch, "arch", "amd64", "architecture of the agent and the image: amd64 or arm64")
	flags.StringVar(&mtime, "mtime", "", "the image's creation time and every file's mtime, seconds since the epoch (default: $SOURCE_DATE_EPOCH, else 0)")
	flags.StringVar(&out, "extension-out", "_out/agent-extension", "OCI image layout directory to write (replaced whole)")
	flags.StringVar(&push, "extension-push", "", "also push the image to this reference, registry/repository:tag")
	flags.BoolVar(&insecure, "extension-insecure", false, "push over plain HTTP (a registry without TLS)")
	flagenv.Annotate(flags)

	return cmd
}

// publish writes img as an OCI layout in out (tagged version), then what more writes,
// pushes it when push names a reference, and prints its digest on stdout: the end of
// every image the imager builds. what names it in the messages.
func publish(cmd *cobra.Command, img v1.Image, what, version, out, push string, insecure bool, more func() error) error {
	digest, err := img.Digest()
	if err != nil {
		return fmt.Errorf("error computing the image digest: %w", err)
	}

	if err = ociimage.WriteLayout(cmd.Context(), out, img, version); err != nil {
		return err
	}

	fmt.Fprintf(cmd.ErrOrStderr(), "imager: %s written to %s (OCI layout)\n", what, out)

	if more != nil {
		if err = more(); err != nil {
			return err
		}
	}

	if push != "" {
		pushed, err := ociimage.Push(cmd.Context(), img, push, insecure)
		if err != nil {
			return err
		}

		fmt.Fprintf(cmd.ErrOrStderr(), "imager: pushed %s\n", pushed)
	}

	fmt.Fprintln(cmd.OutOrStdout(), digest)

	return nil
}
