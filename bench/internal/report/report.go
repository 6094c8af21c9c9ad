// Package report holds the benchmark results table: Anvil against its peer, the ratio,
// the goal and whether it was met.
package report

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"
)

// Goal says what "met" means for a row.
type Goal int

// Kinds of goals.
const (
	// RatioAtLeast: anvil/peer >= Target.
	RatioAtLeast Goal = iota
	// AnvilAtMost: the Anvil value <= Target (in the row's unit).
	AnvilAtMost
	// RatioAtMost: anvil/peer <= Target (lower is better, e.g. a cost).
	RatioAtMost
	// Info: no goal, a figure to read.
	Info
)

// Row is one measured quantity.
type Row struct {
	Name     string
	Unit     string
	Anvil    float64
	Peer     float64 // 0 when there is no peer figure
	PeerName string  // the peer's name
	Goal     Goal
	Target   float64
}

// Ratio is Anvil/Peer, or 0 without a peer figure.
func (r Row) Ratio() float64 {
	if r.Peer == 0 {
		return 0
	}

	return r.Anvil / r.Peer
}

// Met reports whether the goal is met.
func (r Row) Met() bool {
	switch r.Goal {
	case AnvilAtMost:
		return r.Anvil <= r.Target
	case RatioAtMost:
		return r.Peer > 0 && r.Ratio() <= r.Target
	default:
		return r.Peer > 0 && r.Ratio() >= r.Target
	}
}

func (r Row) goalText() string {
	switch r.Goal {
	case AnvilAtMost:
		return fmt.Sprintf("anvil <= %s %s", num(r.Target), r.Unit)
	case RatioAtMost:
		return fmt.Sprintf("<= %.2fx", r.Target)
	case Info:
		return "-"
	default:
		return fmt.Sprintf(">= %.2fx", r.Target)
	}
}

// Report is the rows and free-form notes of a run.
type Report struct {
	Rows  []Row
	Notes []string
}

// Add appends a row.
func (rep *Report) Add(r Row) { rep.Rows = append(rep.Rows, r) }

// Notef appends a note.
func (rep *Report) Notef(format string, args ...any) {
	rep.Notes = append(rep.Notes, fmt.Sprintf(format, args...))
}

// Write prints the table and the notes.
func (rep *Report) Write(w io.Writer) error {
	var b strings.Builder

	fmt.Fprintf(&b, "Anvil benchmarks, %s\n\n", time.Now().UTC().Format(time.RFC3339))

	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "BENCHMARK\tUNIT\tANVIL\tPEER\tPEER VALUE\tRATIO\tGOAL\tRESULT")

	for _, r := range rep.Rows {
		peer, ratio := "-", "-"
		if r.Peer > 0 {
			peer = num(r.Peer)
			ratio = fmt.Sprintf("%.3fx", r.Ratio())
		}

		result := "MISS"

		switch {
		case r.Goal == Info:
			result = "info"
		case r.Met():
			result = "PASS"
		}

		name := r.PeerName
		if name == "" {
			name = "-"
		}

		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Name, r.Unit, num(r.Anvil), name, peer, ratio, r.goalText(), result)
	}

	if err := tw.Flush(); err != nil {
		return fmt.Errorf("error formatting the report: %w", err)
	}

	if len(rep.Notes) > 0 {
		b.WriteString("\nNotes:\n")

		for _, n := range rep.Notes {
			b.WriteString("  " + n + "\n")
		}
	}

	_, err := io.WriteString(w, b.String())
	if err != nil {
		return fmt.Errorf("error writing the report: %w", err)
	}

	return nil
}

// Save writes the report to path (its directory is created).
func (rep *Report) Save(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("error creating the report directory: %w", err)
	}

	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("error creating the report: %w", err)
	}

	if err = rep.Write(f); err != nil {
		f.Close()

		return err
	}

	if err = f.Close(); err != nil {
		return fmt.Errorf("error closing the report: %w", err)
	}

	return nil
}

func num(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}
