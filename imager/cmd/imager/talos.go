package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/anvil-metal/anvil/imager/internal/talosbuild"
	"github.com/anvil-metal/anvil/internal/flagenv"
)

// newTalosCommand is "imager talos": real Talos boot assets for the lab (make talos).
// Its flags are prefixed (--talos-out) so that their ANVIL_ variables do not collide
// with the agent's.
func newTalosCommand() *cobra.Command {
	var (
		opts         talosbuild.Options
		mtime, cache string
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

			if cache != "" {
				return buildCached(cmd, opts, cache)
			}

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
	flags.StringVar(&cache, "talos-cache", "", "keep the assets in <dir>/<key> (the key names every input), link --talos-out to them, and build only when that key is missing")
	flags.StringVar(&mtime, "mtime", "", "time of every file in the images, seconds since the epoch (default: $SOURCE_DATE_EPOCH, else 0)")
	flagenv.Annotate(flags)

	return cmd
}

// keptBuilds are the builds a cache keeps: this one and the one before.
const keptBuilds = 2

// buildCached builds into cache/<key> unless it is there, then links opts.Out to it.
func buildCached(cmd *cobra.Command, opts talosbuild.Options, cache string) error {
	key, err := talosbuild.Key(opts)
	if err != nil {
		return err
	}

	dir := filepath.Join(cache, key)
	out := opts.Out

	if _, err := os.Stat(filepath.Join(dir, talosbuild.ManifestFile)); err == nil {
		fmt.Fprintf(cmd.OutOrStdout(), "Talos %s: cached as %s\n", opts.TalosVersion, key)
	} else {
		tmp := dir + ".tmp"
		_ = os.RemoveAll(tmp)
		opts.Out = tmp

		m, err := talosbuild.Build(cmd.Context(), opts)
		if err != nil {
			_ = os.RemoveAll(tmp)

			return err
		}

		if err := os.Rename(tmp, dir); err != nil {
			return fmt.Errorf("error caching the assets: %w", err)
		}

		fmt.Fprintf(cmd.OutOrStdout(), "Talos %s on Linux %s: built as %s, initramfs sha256 %s\n",
			m.TalosVersion, m.KernelVersion, key, m.Files[talosbuild.InitramfsFile])

		prune(cache, keptBuilds)
	}

	// Touched on use: pruning keeps the newest.
	now := time.Now()
	_ = os.Chtimes(dir, now, now)

	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return fmt.Errorf("error making %s: %w", filepath.Dir(out), err)
	}

	if err := os.RemoveAll(out); err != nil {
		return fmt.Errorf("error replacing %s: %w", out, err)
	}

	return os.Symlink(dir, out) //nolint:wrapcheck // names both paths
}

// prune removes all but the newest keep builds in cache.
func prune(cache string, keep int) {
	entries, err := os.ReadDir(cache)
	if err != nil {
		return
	}

	type build struct {
		path string
		mod  time.Time
	}

	var builds []build

	for _, e := range entries {
		info, err := e.Info()
		if err != nil || !e.IsDir() || strings.HasSuffix(e.Name(), ".tmp") {
			continue
		}

		builds = append(builds, build{filepath.Join(cache, e.Name()), info.ModTime()})
	}

	slices.SortFunc(builds, func(a, b build) int { return b.mod.Compare(a.mod) })

	for _, b := range builds[min(keep, len(builds)):] {
		_ = os.RemoveAll(b.path)
	}
}
