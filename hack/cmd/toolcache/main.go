// Command toolcache builds a binary from a Go tools module (hack/tools/<module>) through
// a cache outside the clone ($ANVIL_CACHE_DIR, else $XDG_CACHE_HOME/anvil or
// ~/.cache/anvil): on a hit it copies the cached binary to --out, on a miss it
// builds it into the cache first (hack/internal/toolcache says what the key holds).
// Everything after "--" is passed to go build as is, one argument each.
//
//	toolcache build --module hack/tools/omni --pkg github.com/siderolabs/omni/cmd/omni \
//		--out _out/bin/omni [--name omni] [--env CGO_ENABLED=0]... -- -trimpath -ldflags='-s -w'
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/anvil-metal/anvil/hack/internal/toolcache"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "toolcache:", err)
		os.Exit(1)
	}
}

// envFlags are repeated --env KEY=VALUE flags.
type envFlags []string

func (e *envFlags) String() string { return strings.Join(*e, " ") }

func (e *envFlags) Set(v string) error {
	*e = append(*e, v)

	return nil
}

func run(args []string) error {
	if len(args) == 0 || args[0] != "build" {
		return errors.New("usage: toolcache build --module DIR --pkg PKG --out PATH [--name NAME] [--env KEY=VALUE]... [-- go build flags]")
	}

	fs := flag.NewFlagSet("toolcache build", flag.ContinueOnError)

	var (
		b   toolcache.Build
		env envFlags
	)

	fs.StringVar(&b.Module, "module", "", "the tools module's directory, where go build runs")
	fs.StringVar(&b.Pkg, "pkg", "", "the package to build: an import path, or ./dir inside the module")
	fs.StringVar(&b.Name, "name", "", "the binary's name in the cache (default: --out's base name)")
	fs.Var(&env, "env", "KEY=VALUE added to go build's environment and to the key (repeated)")
	out := fs.String("out", "", "where the binary goes")
	keep := fs.Int("keep", toolcache.DefaultKeep, "keys kept per binary name")
	dir := fs.String("cache", "", "the cache directory (default: $ANVIL_CACHE_DIR, else $XDG_CACHE_HOME/anvil or ~/.cache/anvil)")

	if err := fs.Parse(args[1:]); err != nil {
		return err
	}

	if *out == "" {
		return errors.New("--out is required")
	}

	b.Flags = fs.Args()
	b.Env = env

	if b.Name == "" {
		b.Name = filepath.Base(*out)
	}

	if *dir == "" {
		d, err := toolcache.DefaultDir()
		if err != nil {
			return err
		}

		*dir = d
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	c := &toolcache.Cache{Dir: *dir, Keep: *keep, Log: os.Stderr}
	start := time.Now()

	res, err := c.Install(ctx, b, *out)
	if err != nil {
		return fmt.Errorf("%s: %w", b.Name, err)
	}

	took := time.Since(start).Round(10 * time.Millisecond)

	if res.Hit {
		fmt.Fprintf(os.Stderr, "toolcache: %s hit %s, copied to %s (%s)\n", b.Name, res.Short(), *out, took)
	} else {
		fmt.Fprintf(os.Stderr, "toolcache: %s built %s in %s, copied to %s\n", b.Name, res.Short(), took, *out)
	}

	return nil
}
