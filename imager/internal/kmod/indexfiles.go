package kmod

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/anvil-metal/anvil/internal/modules"
)

// IndexFiles renders the modules tree's index files for the selection:
//
//   - modules.dep, modules.alias, modules.softdep, modules.devname, modules.order: only
//     lines about selected modules (and, in modules.softdep, only selected targets), so
//     every module they name is shipped; paths use the decompressed .ko names;
//   - modules.builtin, modules.builtin.modinfo: whole — they describe the kernel image,
//     not files, and tell the agent that a driver needs no loading.
//
// The binary .bin indexes and modules.symbols are left out: they would describe modules
// that are not shipped, and the agent reads the text files.
func (s *Selection) IndexFiles() ([]File, error) {
	var files []File

	dep := &strings.Builder{}

	for m := range s.Index.Modules() {
		if !s.set[m.Name] {
			continue
		}

		fmt.Fprintf(dep, "%s:", plainPath(m.Path))

		for _, name := range m.Deps {
			// Select took every dependency, so the index knows it.
			d, _ := s.Index.Module(name)
			fmt.Fprintf(dep, " %s", plainPath(d.Path))
		}

		dep.WriteString("\n")
	}

	files = append(files, File{Name: "modules.dep", Data: []byte(dep.String())})

	// Each filter keeps a line when it is about a selected module; lines it does not
	// understand (comments) are kept as they are.
	filters := []struct {
		name   string
		filter func(line string) (string, bool)
	}{
		{"modules.alias", func(line string) (string, bool) {
			f := strings.Fields(line)

			return line, len(f) != 3 || f[0] != "alias" || s.set[modules.Name(f[2])]
		}},
		{"modules.softdep", s.softdepLine},
		{"modules.devname", func(line string) (string, bool) {
			f := strings.Fields(line)

			return line, len(f) == 0 || strings.HasPrefix(line, "#") || s.set[modules.Name(f[0])]
		}},
		{"modules.order", func(line string) (string, bool) {
			return plainPath(line), s.set[modules.Name(line)]
		}},
		{"modules.builtin", nil},
		{"modules.builtin.modinfo", nil},
	}

	for _, f := range filters {
		data, err := os.ReadFile(filepath.Join(s.Index.Dir(), f.name))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}

		if err != nil {
			return nil, fmt.Errorf("error reading %s: %w", f.name, err)
		}

		if f.filter != nil {
			data = filterLines(data, f.filter)
		}

		files = append(files, File{Name: f.name, Data: data})
	}

	return files, nil
}

// softdepLine keeps "softdep <mod> pre: a b post: c" for a selected module, with only the
// targets that resolve to selected modules.
func (s *Selection) softdepLine(line string) (string, bool) {
	f := strings.Fields(line)
	if len(f) < 2 || f[0] != "softdep" {
		return line, true
	}

	if !s.set[modules.Name(f[1])] {
		return "", false
	}

	kept := f[:2]

	for _, t := range f[2:] {
		if t == "pre:" || t == "post:" {
			kept = append(kept, t)

			continue
		}

		resolved := s.Index.Resolve(t)
		if len(resolved) > 0 && s.set[resolved[0]] {
			kept = append(kept, t)
		}
	}

	return strings.Join(kept, " "), true
}

func filterLines(data []byte, keep func(string) (string, bool)) []byte {
	var out strings.Builder

	for _, line := range strings.SplitAfter(string(data), "\n") {
		if line == "" {
			continue
		}

		text, ok := keep(strings.TrimSuffix(line, "\n"))
		if ok {
			out.WriteString(text)
			out.WriteString("\n")
		}
	}

	return []byte(out.String())
}
