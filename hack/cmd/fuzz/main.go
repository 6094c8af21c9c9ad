// Command fuzz runs Anvil's fuzz targets one after another, each for FUZZTIME (default
// 2m), and prints a table of executions, executions per second, new interesting inputs
// and crashers (make fuzz).
//
//	go run ./hack/cmd/fuzz [-fuzztime 2m] [-run REGEXP] [-parallel N] [-minimizetime 200x] [-v]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"regexp"
	"syscall"
	"time"

	"github.com/anvil-metal/anvil/hack/cmd/fuzz/fuzzrun"
)

// targets are every fuzz target of the provider; a new one is added here.
var targets = []fuzzrun.Target{
	{Pkg: "./provider/internal/pxe", Name: "FuzzAnswer"},
	{Pkg: "./provider/internal/pxe", Name: "FuzzDHCPServer"},
	{Pkg: "./provider/internal/pxe", Name: "FuzzCleanTFTPPath"},
	{Pkg: "./provider/internal/pxe", Name: "FuzzTFTPRequest"},
	{Pkg: "./internal/tftp", Name: "FuzzRequest"},
	{Pkg: "./provider/internal/boot", Name: "FuzzParseQuery"},
	{Pkg: "./provider/internal/httpapi", Name: "FuzzBootScriptQuery"},
	{Pkg: "./provider/internal/httpapi", Name: "FuzzMetadata"},
	{Pkg: "./provider/internal/httpapi", Name: "FuzzEventSink"},
	{Pkg: "./provider/internal/agentapi", Name: "FuzzSession"},
	{Pkg: "./provider/internal/control", Name: "FuzzTransitions"},
	{Pkg: "./provider/internal/power/ipmi", Name: "FuzzIPMIReply"},
	{Pkg: "./provider/internal/power/redfish", Name: "FuzzRedfishReply"},
	{Pkg: "./internal/disksel", Name: "FuzzParse"},
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "fuzz:", err)
		os.Exit(1)
	}
}

func run() error {
	fuzzTime := 2 * time.Minute

	if v := os.Getenv("FUZZTIME"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("error parsing FUZZTIME %q: %w", v, err)
		}

		fuzzTime = d
	}

	flag.DurationVar(&fuzzTime, "fuzztime", fuzzTime, "how long each target is fuzzed (env FUZZTIME)")
	match := flag.String("run", "", "only the targets whose package.name matches this regexp")
	parallel := flag.Int("parallel", 2, "fuzz workers per target")
	minimize := flag.String("minimizetime", "200x", "how long each new or failing input is minimized: a duration or a count of runs (go test -fuzzminimizetime)")
	verbose := flag.Bool("v", false, "print go test's output")
	flag.Parse()

	re, err := regexp.Compile(*match)
	if err != nil {
		return fmt.Errorf("error parsing -run: %w", err)
	}

	var selected []fuzzrun.Target

	for _, t := range targets {
		if re.MatchString(t.String()) {
			selected = append(selected, t)
		}
	}

	if len(selected) == 0 {
		return fmt.Errorf("no target matches %q", *match)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	opts := fuzzrun.Options{FuzzTime: fuzzTime, MinimizeTime: *minimize, Parallel: *parallel}
	if *verbose {
		opts.Log = os.Stderr
	}

	fmt.Fprintf(os.Stderr, "fuzzing %d targets for %s each\n", len(selected), fuzzTime)

	results := fuzzrun.Run(ctx, selected, opts)

	if err = fuzzrun.WriteTable(os.Stdout, results); err != nil {
		return err
	}

	failed := 0

	for _, r := range results {
		if r.Failed {
			failed++

			fmt.Fprintf(os.Stderr, "%s: %v\n", r.Target, r.Err)

			if !*verbose {
				fmt.Fprintln(os.Stderr, r.Tail)
			}

			for _, c := range r.Crashers {
				fmt.Fprintf(os.Stderr, "  crasher: %s/%s\n", r.Pkg, c)
			}
		}
	}

	if failed > 0 {
		return fmt.Errorf("%d of %d targets failed", failed, len(results))
	}

	return nil
}
