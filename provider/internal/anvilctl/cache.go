package anvilctl

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	controlv1 "github.com/anvil-metal/anvil/api/control/v1"
	"github.com/anvil-metal/anvil/provider/internal/fleet"
)

// shortDigest is how much of a digest's hex the table shows, as container tools do.
const shortDigest = 12

func newCacheCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cache",
		Short: "The provider's cache of Talos boot assets: list, pull (seed), prune",
		Long: `The provider fetches each schematic and version's kernel, initramfs and cmdline
from the Image Factory once and serves them to machines itself. 'pull' seeds the cache,
so that a site the factory cannot reach still boots.`,
	}

	cmd.AddCommand(newCacheListCommand(a), newCachePullCommand(a), newCachePruneCommand(a))

	return cmd
}

func (a *app) imageCache() (controlv1.ImageCacheServiceClient, error) {
	conn, err := a.connect()
	if err != nil {
		return nil, err
	}

	return controlv1.NewImageCacheServiceClient(conn), nil
}

func newCacheListCommand(a *app) *cobra.Command {
	var output string

	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the cached boot assets",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !slices.Contains([]string{"table", "yaml", "json"}, output) {
				return fmt.Errorf("output %q is not one of table, yaml, json", output)
			}

			c, err := a.imageCache()
			if err != nil {
				return err
			}

			resp, err := c.ListImageCache(cmd.Context(), &controlv1.ListImageCacheRequest{})
			if err != nil {
				return err
			}

			return printImages(&printer{w: cmd.OutOrStdout(), format: output}, resp.GetImages(), time.Now())
		},
	}

	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table, yaml or json")

	return cmd
}

func newCachePullCommand(a *app) *cobra.Command {
	req := controlv1.PullImageCacheRequest{}

	cmd := &cobra.Command{
		Use:   "pull <schematic> <version>",
		Short: "Fetch a schematic and version's kernel, initramfs and cmdline into the cache",
		Example: `  anvilctl cache pull 376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba v1.9.0
  anvilctl cache pull <schematic> v1.9.0 --arch arm64`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.imageCache()
			if err != nil {
				return err
			}

			req.Schematic, req.Version = args[0], args[1]

			resp, err := c.PullImageCache(cmd.Context(), &req)
			if err != nil {
				return err
			}

			return printImages(&printer{w: cmd.OutOrStdout(), format: "table"}, resp.GetImages(), time.Now())
		},
	}

	cmd.Flags().StringVar(&req.Arch, "arch", "amd64", "architecture: amd64 or arm64")

	return cmd
}

func newCachePruneCommand(a *app) *cobra.Command {
	var (
		req       controlv1.PruneImageCacheRequest
		olderThan time.Duration
	)

	cmd := &cobra.Command{
		Use:   "prune",
		Short: "Remove cached boot assets (those being served stay)",
		Example: `  anvilctl cache prune --all
  anvilctl cache prune --older-than 720h
  anvilctl cache prune --keep-schematic <schematic>   # every other schematic's`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if olderThan < 0 {
				return fmt.Errorf("--older-than must not be negative")
			}

			if !req.GetAll() && olderThan == 0 && len(req.GetKeepSchematics()) == 0 {
				return fmt.Errorf("say what to prune: --all, --older-than or --keep-schematic")
			}

			c, err := a.imageCache()
			if err != nil {
				return err
			}

			req.OlderThanSeconds = int64(olderThan / time.Second)

			resp, err := c.PruneImageCache(cmd.Context(), &req)
			if err != nil {
				return err
			}

			return printPruned(cmd.OutOrStdout(), resp.GetRemoved())
		},
	}

	cmd.Flags().BoolVar(&req.All, "all", false, "remove every cached asset")
	cmd.Flags().DurationVar(&olderThan, "older-than", 0, "remove the assets not used for this long (720h)")
	cmd.Flags().StringSliceVar(&req.KeepSchematics, "keep-schematic", nil, "keep this schematic's assets (repeatable, or separated by commas)")

	return cmd
}

// cachedImage is a cached asset as anvilctl prints it in YAML and JSON.
type cachedImage struct {
	Schematic string `yaml:"schematic"`
	Version   string `yaml:"version"`
	File      string `yaml:"file"`
	Digest    string `yaml:"digest"`
	Size      int64  `yaml:"size"`
	FetchedAt string `yaml:"fetchedAt"`
	UsedAt    string `yaml:"usedAt"`
}

func printImages(p *printer, images []*controlv1.CachedImage, now time.Time) error {
	if p.format != "table" {
		out := make([]cachedImage, 0, len(images))
		for _, img := range images {
			out = append(out, cachedImage{
				Schematic: img.GetSchematic(), Version: img.GetVersion(), File: img.GetFile(), Digest: img.GetDigest(),
				Size: img.GetSize(), FetchedAt: img.GetFetchedAt(), UsedAt: img.GetUsedAt(),
			})
		}

		return p.structured(out)
	}

	rows := [][]string{{"SCHEMATIC", "VERSION", "FILE", "SIZE", "DIGEST", "FETCHED", "USED"}}

	for _, img := range images {
		rows = append(rows, []string{
			img.GetSchematic(), img.GetVersion(), img.GetFile(), fleet.DiskSize(uint64(max(img.GetSize(), 0))),
			short(img.GetDigest()), ago(img.GetFetchedAt(), now), ago(img.GetUsedAt(), now),
		})
	}

	return p.table(rows)
}

func printPruned(w io.Writer, removed []*controlv1.CachedImage) error {
	var total int64

	for _, img := range removed {
		total += img.GetSize()

		if _, err := fmt.Fprintf(w, "removed %s/%s/%s (%s)\n", img.GetSchematic(), img.GetVersion(), img.GetFile(), short(img.GetDigest())); err != nil {
			return err
		}
	}

	_, err := fmt.Fprintf(w, "pruned %d cached assets, %s\n", len(removed), fleet.DiskSize(uint64(max(total, 0))))

	return err
}

// short is a digest's first hex digits.
func short(digest string) string {
	hex := digest[strings.IndexByte(digest, ':')+1:]
	if len(hex) > shortDigest {
		hex = hex[:shortDigest]
	}

	return orDash(hex)
}

// ago prints an RFC 3339 time as how long ago it was.
func ago(rfc3339 string, now time.Time) string {
	t, err := time.Parse(time.RFC3339, rfc3339)
	if err != nil || t.IsZero() {
		return "-"
	}

	return now.Sub(t).Truncate(time.Second).String() + " ago"
}
