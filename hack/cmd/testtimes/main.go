// Command testtimes prints make test's time table: each phase's wall time (from the
// phases file make test writes) and, per go test run, the time go test reported for each
// package, slowest first, with the failed ones marked. The table goes to stdout and, with
// -out, to a file too.
//
//	go run ./hack/cmd/testtimes -phases _out/test-logs/phases \
//		-run unit=_out/test-logs/unit.log -run lab=_out/test-logs/lab.log \
//		-module github.com/anvil-metal/anvil -out _out/test-times.txt
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/anvil-metal/anvil/hack/internal/testtimes"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "testtimes:", err)
		os.Exit(1)
	}
}

// runFlags are repeated -run NAME=LOG flags.
type runFlags []string

func (r *runFlags) String() string { return strings.Join(*r, " ") }

func (r *runFlags) Set(v string) error {
	if name, path, ok := strings.Cut(v, "="); !ok || name == "" || path == "" {
		return fmt.Errorf("want NAME=LOG, got %q", v)
	}

	*r = append(*r, v)

	return nil
}

func run() error {
	var runs runFlags

	phases := flag.String("phases", "", "the phases file: a line <name> <start> <end> <exit status> per phase run")
	flag.Var(&runs, "run", "NAME=LOG: a go test run's output (repeated; a missing LOG is a run that did not happen)")
	module := flag.String("module", "", "the main module's path, its packages shown as ./dir")
	out := flag.String("out", "", "a file to write the table to as well")
	flag.Parse()

	rep := testtimes.Report{Module: *module}

	if *phases != "" {
		b, err := os.ReadFile(*phases)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}

		if rep.Phases, err = testtimes.ParsePhases(bytes.NewReader(b)); err != nil {
			return err
		}
	}

	for _, r := range runs {
		name, path, _ := strings.Cut(r, "=")

		f, err := os.Open(path)
		if errors.Is(err, fs.ErrNotExist) {
			rep.Runs = append(rep.Runs, testtimes.Run{Name: name, Missing: true})

			continue
		}

		if err != nil {
			return err
		}

		pkgs, err := testtimes.ParseGoTest(f)
		f.Close()

		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}

		rep.Runs = append(rep.Runs, testtimes.Run{Name: name, Packages: pkgs})
	}

	var buf bytes.Buffer
	if err := testtimes.Write(&buf, rep); err != nil {
		return err
	}

	if _, err := os.Stdout.Write(buf.Bytes()); err != nil {
		return err
	}

	if *out != "" {
		if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
			return err
		}

		if err := os.WriteFile(*out, buf.Bytes(), 0o644); err != nil {
			return err
		}
	}

	return nil
}
