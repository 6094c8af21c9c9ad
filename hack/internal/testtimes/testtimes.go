// Package testtimes reads where make test's time went — each phase's wall time, and the
// time go test reported for each package of the unit and lab runs — and renders it as
// one table, the suite's budget.
package testtimes

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Package is one package's line in go test's output.
type Package struct {
	Name    string
	Elapsed time.Duration // as go test reports it (zero for a build failure or a cached result)
	Failed  bool
	Note    string // "build failed", "setup failed", "cached"
}

// A package's result line: "ok  \t<pkg>\t1.234s", possibly with coverage after it,
// "ok  \t<pkg>\t(cached)", "FAIL\t<pkg>\t1.234s", "FAIL\t<pkg> [build failed]". A test's
// own output that happens to start with "ok" does not end in one of those.
var resultLine = regexp.MustCompile(`^(ok|FAIL)\s+(\S+)\s+(?:([0-9]+(?:\.[0-9]+)?)s(?:\s.*)?|\((cached)\)(?:\s.*)?|\[([a-z ]+)\])$`)

// ParseGoTest reads go test's output (not -json) and returns its packages in the order
// go test finished them. A package reported twice keeps its last report.
func ParseGoTest(r io.Reader) ([]Package, error) {
	var (
		pkgs  []Package
		index = map[string]int{}
	)

	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)

	for sc.Scan() {
		m := resultLine.FindStringSubmatch(strings.TrimRight(sc.Text(), "\r"))
		if m == nil {
			continue
		}

		p := Package{Name: m[2], Failed: m[1] == "FAIL"}

		switch {
		case m[3] != "":
			secs, err := strconv.ParseFloat(m[3], 64)
			if err != nil {
				return nil, fmt.Errorf("error parsing the time of %s: %w", p.Name, err)
			}

			p.Elapsed = time.Duration(secs * float64(time.Second))
		case m[4] != "":
			p.Note = m[4]
		default:
			p.Note = m[5]
		}

		if i, ok := index[p.Name]; ok {
			pkgs[i] = p

			continue
		}

		index[p.Name] = len(pkgs)
		pkgs = append(pkgs, p)
	}

	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("error reading go test's output: %w", err)
	}

	return pkgs, nil
}

// Phase is one step of make test: its name, when it ran and its exit status.
type Phase struct {
	Name       string
	Start, End time.Time
	Status     int
}

// Wall is the phase's wall time.
func (p Phase) Wall() time.Duration { return p.End.Sub(p.Start) }

// ParsePhases reads the phases file make test writes, a line per phase run:
//
//	<name> <start> <end> <exit status>
//
// the times in seconds since the epoch (date +%s.%N).
func ParsePhases(r io.Reader) ([]Phase, error) {
	var phases []Phase

	sc := bufio.NewScanner(r)

	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}

		f := strings.Fields(line)
		if len(f) != 4 {
			return nil, fmt.Errorf("phases line %d: want <name> <start> <end> <status>, got %q", n, line)
		}

		start, err1 := parseEpoch(f[1])
		end, err2 := parseEpoch(f[2])
		status, err3 := strconv.Atoi(f[3])

		if err1 != nil || err2 != nil || err3 != nil {
			return nil, fmt.Errorf("phases line %d: bad time or status in %q", n, line)
		}

		phases = append(phases, Phase{Name: f[0], Start: start, End: end, Status: status})
	}

	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("error reading the phases: %w", err)
	}

	return phases, nil
}

// parseEpoch reads seconds since the epoch with an optional fraction ("1700000000.123").
func parseEpoch(s string) (time.Time, error) {
	whole, frac, _ := strings.Cut(s, ".")

	sec, err := strconv.ParseInt(whole, 10, 64)
	if err != nil {
		return time.Time{}, err
	}

	var nsec int64

	if frac != "" {
		frac = (frac + "000000000")[:9]

		if nsec, err = strconv.ParseInt(frac, 10, 64); err != nil {
			return time.Time{}, err
		}
	}

	return time.Unix(sec, nsec), nil
}
