// Package fuzzrun runs Go fuzz targets one after another for a set time each and
// summarises what each did: executions, executions per second, new interesting inputs
// (coverage) and crashers.
package fuzzrun

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Target is one fuzz function in one package.
type Target struct {
	Pkg  string // import path or ./relative
	Name string // FuzzXxx
}

func (t Target) String() string { return t.Pkg + "." + t.Name }

// Result is what one target's run did.
type Result struct {
	Target
	Execs       int64
	Elapsed     time.Duration // fuzzing time as go test reports it (compile time excluded)
	Interesting int64         // new interesting inputs found in this run
	Crashers    []string      // corpus files of failing inputs written by go test
	Failed      bool          // go test failed (a crasher, or the seeds or the build)
	Err         error
	// Tail is the end of go test's output, kept when it failed.
	Tail string
}

// ExecsPerSec is the execution rate over the fuzzing time.
func (r Result) ExecsPerSec() float64 {
	if r.Elapsed <= 0 {
		return 0
	}

	return float64(r.Execs) / r.Elapsed.Seconds()
}

// Options say how targets are run.
type Options struct {
	FuzzTime time.Duration
	// MinimizeTime bounds the minimization of each new input: go test's
	// -fuzzminimizetime, a duration or a count ("100x"); go test's own 60s would eat
	// short runs. Empty: go test's default.
	MinimizeTime string
	// Parallel is go test's -parallel: fuzz workers per target.
	Parallel int
	// Dir is the module root go test runs in.
	Dir string
	// Log receives go test's output as it comes.
	Log io.Writer
}

// Run fuzzes each target in turn; a target that fails does not stop the others.
func Run(ctx context.Context, targets []Target, opts Options) []Result {
	results := make([]Result, 0, len(targets))

	for _, t := range targets {
		if ctx.Err() != nil {
			break
		}

		results = append(results, runOne(ctx, t, opts))
	}

	return results
}

func runOne(ctx context.Context, t Target, opts Options) Result {
	args := []string{
		"test", "-run", "^$", "-fuzz", "^" + t.Name + "$", "-fuzztime", opts.FuzzTime.String(),
		"-parallel", strconv.Itoa(max(opts.Parallel, 1)),
	}

	if opts.MinimizeTime != "" {
		args = append(args, "-fuzzminimizetime", opts.MinimizeTime)
	}

	args = append(args, t.Pkg)

	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = opts.Dir
	// go test stops its workers on an interrupt; a kill is the last resort.
	cmd.WaitDelay = 30 * time.Second

	var out bytes.Buffer

	w := io.Writer(&out)
	if opts.Log != nil {
		w = io.MultiWriter(&out, opts.Log)
	}

	cmd.Stdout, cmd.Stderr = w, w

	err := cmd.Run()

	r := Parse(out.Bytes())
	r.Target = t

	if err != nil {
		r.Failed = true
		r.Err = fmt.Errorf("go %s: %w", strings.Join(args, " "), err)
		r.Tail = tail(out.String(), 40)
	}

	return r
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")

	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

var (
	// fuzz: elapsed: 10s, execs: 123456 (12345/sec), new interesting: 3 (total: 42)
	progressRe = regexp.MustCompile(`fuzz: elapsed: (\d+)s, execs: (\d+) \(\d+/sec\)(?:, new interesting: (\d+) \(total: \d+\))?`)
	// Failing input written to testdata/fuzz/FuzzX/0123abcd
	crasherRe = regexp.MustCompile(`Failing input written to (\S+)`)
)

// Parse reads go test -fuzz output: the last progress line gives the totals.
func Parse(out []byte) Result {
	var r Result

	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)

	for sc.Scan() {
		line := sc.Text()

		if m := progressRe.FindStringSubmatch(line); m != nil {
			secs, _ := strconv.ParseInt(m[1], 10, 64)
			r.Execs, _ = strconv.ParseInt(m[2], 10, 64)
			r.Elapsed = time.Duration(secs) * time.Second

			if m[3] != "" {
				r.Interesting, _ = strconv.ParseInt(m[3], 10, 64)
			}

			continue
		}

		if m := crasherRe.FindStringSubmatch(line); m != nil {
			r.Crashers = append(r.Crashers, m[1])
		}
	}

	return r
}

// WriteTable prints the results, one target a row.
func WriteTable(w io.Writer, results []Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)

	fmt.Fprintln(tw, "target\texecs\texecs/s\tnew interesting\tcrashers\tresult\t")

	for _, r := range results {
		status := "ok"
		if r.Failed {
			status = "FAIL"
		}

		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%d\t%d\t%s\t\n", r.Target, r.Execs, r.ExecsPerSec(), r.Interesting, len(r.Crashers), status)
	}

	if err := tw.Flush(); err != nil {
		return fmt.Errorf("error writing the table: %w", err)
	}

	return nil
}
