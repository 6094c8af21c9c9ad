package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/anvil-metal/anvil/imager/internal/capirelease"
	"github.com/anvil-metal/anvil/imager/internal/providerimage"
	"github.com/anvil-metal/anvil/internal/flagenv"
)

// newCAPIReleaseCommand is "imager capi-release": the Cluster API provider's release,
// its manager's image and the manifests clusterctl installs with that image's reference.
func newCAPIReleaseCommand() *cobra.Command {
	var (
		opts                                   providerimage.ManagerOptions
		manifests, releaseOut, repo, out, push string
		mtime                                  string
		insecure                               bool
	)

	cmd := &cobra.Command{
		Use:          "capi-release",
		Short:        "Build the Cluster API manager's OCI image and infrastructure-components.yaml + metadata.yaml for clusterctl",
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

			img, err := providerimage.BuildManager(cmd.Context(), opts)
			if err != nil {
				return err
			}

			image := repo + ":" + opts.Version

			return publish(cmd, img, "the Cluster API manager's image "+opts.Version, opts.Version, out, push, insecure, func() error {
				if err := capirelease.Write(manifests, releaseOut, image); err != nil {
					return err
				}

				fmt.Fprintf(cmd.ErrOrStderr(), "imager: %s/infrastructure-components.yaml (image %s) and metadata.yaml written\n", releaseOut, image)

				return nil
			})
		},
	}

	flags := cmd.Flags()
	flags.StringVar(&opts.Manager, "manager-bin", "", "the capi-manager binary (static: CGO_ENABLED=0)")
	flags.StringVar(&opts.Arch, "arch", "amd64", "architecture of the binary and the image: amd64 or arm64")
	flags.StringVar(&opts.Version, "image-version", "dev", "the image's version label and tag")
	flags.StringVar(&opts.Revision, "image-revision", "", "the image's revision label: the source's commit")
	flags.StringVar(&mtime, "mtime", "", "the image's creation time, seconds since the epoch (default: $SOURCE_DATE_EPOCH, else 0)")
	flags.StringVar(&manifests, "manifests", "deploy/capi", "directory of the CRDs (crd/), ClusterRole (rbac/), manager.yaml and metadata.yaml")
	flags.StringVar(&releaseOut, "release-out", "_out", "directory to write infrastructure-components.yaml and metadata.yaml into")
	flags.StringVar(&repo, "image-repository", "ghcr.io/anvil-metal/anvil-capi-manager", "the repository the manifests name the image by (tag: --image-version)")
	flags.StringVar(&out, "image-out", "_out/capi-image", "OCI image layout directory to write (replaced whole)")
	flags.StringVar(&push, "image-push", "", "also push the image to this reference, registry/repository:tag")
	flags.BoolVar(&insecure, "image-insecure", false, "push over plain HTTP (a registry without TLS)")
	flagenv.Annotate(flags)

	return cmd
}
