package labtest

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// Figures gather a lab test's figures by section, in the order they are added: a test
// of several scenarios (subtests) reports each in a section of its own.
type Figures struct {
	mu       sync.Mutex
	sections []string
	lines    map[string][]string
}

// Add records a line of figures in section.
func (f *Figures) Add(section, format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()

	if f.lines == nil {
		f.lines = map[string][]string{}
	}

	if !slices.Contains(f.sections, section) {
		f.sections = append(f.sections, section)
	}

	f.lines[section] = append(f.lines[section], fmt.Sprintf(format, args...))
}

// Write prints the figures under title and writes them to path (relative to root).
func (f *Figures) Write(t testing.TB, root, title, path string) {
	f.mu.Lock()
	defer f.mu.Unlock()

	var b strings.Builder

	fmt.Fprintf(&b, "%s %s (%d CPUs)\n", title, time.Now().UTC().Format(time.RFC3339), runtime.NumCPU())

	for _, s := range f.sections {
		fmt.Fprintf(&b, "\n%s\n\n%s\n", s, strings.Join(f.lines[s], "\n"))
	}

	t.Log(b.String())

	out := filepath.Join(root, path)
	if assert.NoError(t, os.MkdirAll(filepath.Dir(out), 0o755)) {
		assert.NoError(t, os.WriteFile(out, []byte(b.String()), 0o644))
	}
}
