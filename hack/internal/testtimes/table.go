package testtimes

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Run is one go test run of make test (unit, lab) and its packages.
type Run struct {
	Name     string
	Packages []Package
	// Missing says the run's output is not there (its phase did not run).
	Missing bool
}

// Report is what the table shows.
type Report struct {
	Phases []Phase
	Runs   []Run
	// Module is the main module's path: its packages are shown as ./dir.
	Module string
}

// Write renders the report: the phases' wall times with their total, then each run's
// packages, slowest first, with their total and the failed ones marked.
func Write(w io.Writer, r Report) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)

	if len(r.Phases) > 0 {
		writePhases(tw, r.Phases)
	}

	for _, run := range r.Runs {
		fmt.Fprintln(tw)
		writeRun(tw, run, r.Module)
	}

	if err := tw.Flush(); err != nil {
		return fmt.Errorf("error writing the table: %w", err)
	}

	return nil
}

func writePhases(tw *tabwriter.Writer, phases []Phase) {
	var (
		total  time.Duration
		failed *Phase
	)

	for i, p := range phases {
		total += p.Wall()

		if p.Status != 0 && failed == nil {
			failed = &phases[i]
		}
	}

	if failed != nil {
		fmt.Fprintf(tw, "make test: FAIL in %s (exit %d), after %s\n\n", failed.Name, failed.Status, Format(total))
	} else {
		fmt.Fprintf(tw, "make test: ok, %s\n\n", Format(total))
	}

	fmt.Fprintf(tw, "phase\t%10s\tresult\n", "wall")

	for _, p := range phases {
		fmt.Fprintf(tw, "%s\t%10s\t%s\n", p.Name, Format(p.Wall()), result(p.Status != 0, statusNote(p.Status)))
	}

	fmt.Fprintf(tw, "total\t%10s\n", Format(total))
}

func statusNote(status int) string {
	if status == 0 {
		return ""
	}

	return fmt.Sprintf("exit %d", status)
}

func writeRun(tw *tabwriter.Writer, run Run, module string) {
	switch {
	case run.Missing:
		fmt.Fprintf(tw, "%s: not run\n", run.Name)

		return
	case len(run.Packages) == 0:
		fmt.Fprintf(tw, "%s: no package reported a result\n", run.Name)

		return
	}

	pkgs := slices.Clone(run.Packages)
	slices.SortStableFunc(pkgs, func(a, b Package) int {
		return cmp.Or(cmp.Compare(b.Elapsed, a.Elapsed), cmp.Compare(a.Name, b.Name))
	})

	var (
		total  time.Duration
		failed int
	)

	for _, p := range pkgs {
		total += p.Elapsed

		if p.Failed {
			failed++
		}
	}

	fmt.Fprintf(tw, "%s: go test's time per package, slowest first (%d packages", run.Name, len(pkgs))

	if failed > 0 {
		fmt.Fprintf(tw, ", %d FAILED", failed)
	}

	fmt.Fprintln(tw, ")")
	fmt.Fprintf(tw, "package\t%10s\tresult\n", "time")

	for _, p := range pkgs {
		fmt.Fprintf(tw, "%s\t%10s\t%s\n", shortName(p.Name, module), Format(p.Elapsed), result(p.Failed, p.Note))
	}

	// go test runs packages side by side: the sum is more than the phase's wall time.
	fmt.Fprintf(tw, "total\t%10s\t(a sum: go test runs packages side by side)\n", Format(total))
}

func result(failed bool, note string) string {
	r := "ok"
	if failed {
		r = "FAIL"
	}

	if note != "" {
		r += " (" + note + ")"
	}

	return r
}

// shortName shows the module's packages as ./dir.
func shortName(pkg, module string) string {
	switch {
	case module == "":
		return pkg
	case pkg == module:
		return "."
	case strings.HasPrefix(pkg, module+"/"):
		return "." + strings.TrimPrefix(pkg, module)
	}

	return pkg
}

// Format prints a duration to a tenth of a second: 12.3s, 4m05.2s, 1h02m03.0s.
func Format(d time.Duration) string {
	d = d.Round(100 * time.Millisecond)

	h := d / time.Hour
	m := (d % time.Hour) / time.Minute
	s := float64(d%time.Minute) / float64(time.Second)

	switch {
	case h > 0:
		return fmt.Sprintf("%dh%02dm%04.1fs", h, m, s)
	case m > 0:
		return fmt.Sprintf("%dm%04.1fs", m, s)
	}

	return fmt.Sprintf("%.1fs", s)
}
