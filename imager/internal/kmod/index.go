// Package kmod reads a kernel's modules tree (/lib/modules/<version>), selects modules by
// name with their full dependency closure, renders the index files (modules.dep,
// modules.alias, ...) filtered to the selection, and finds the firmware they ask for.
package kmod

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// Module is one loadable module as modules.dep lists it.
type Module struct {
	// Name is the normalised module name: file name without .ko[.xz|.zst|.gz], '-' → '_'.
	Name string
	// Path is relative to the modules dir, as in modules.dep (may end in .ko.xz etc.).
	Path string
	// Deps are the names of the modules it needs, in modules.dep order.
	Deps []string
}

// Index is what the modules tree says about its modules.
type Index struct {
	// Dir is the modules tree, e.g. /lib/modules/6.1.0-57-amd64.
	Dir string
	// Modules by name.
	Modules map[string]*Module
	// Order is the modules.dep order of names, kept so filtered files read like the original.
	Order []string
	// Builtin names modules compiled into the kernel (from modules.builtin).
	Builtin map[string]bool
	// aliases maps exact (wildcard-free) aliases to module names, to resolve softdeps
	// such as "crypto-crc32c".
	aliases map[string][]string
	// softdeps maps a module to the names of its pre: and post: soft dependencies.
	softdeps map[string][]string
}

// Name normalises a module file name or path to the name the kernel uses.
func Name(p string) string {
	base := path.Base(filepath.ToSlash(p))
	for _, ext := range []string{".xz", ".zst", ".gz"} {
		base = strings.TrimSuffix(base, ext)
	}

	return strings.ReplaceAll(strings.TrimSuffix(base, ".ko"), "-", "_")
}

// Load reads modules.dep (required), modules.builtin, modules.alias and modules.softdep
// (optional) from dir.
func Load(dir string) (*Index, error) {
	ix := &Index{
		Dir:      dir,
		Modules:  map[string]*Module{},
		Builtin:  map[string]bool{},
		aliases:  map[string][]string{},
		softdeps: map[string][]string{},
	}

	byPath := map[string]string{}

	var rawDeps [][]string

	if err := eachLine(filepath.Join(dir, "modules.dep"), true, func(line string) error {
		target, deps, ok := strings.Cut(line, ":")
		if !ok {
			return fmt.Errorf("malformed line %q", line)
		}

		m := &Module{Name: Name(target), Path: target}
		ix.Modules[m.Name] = m
		ix.Order = append(ix.Order, m.Name)
		byPath[target] = m.Name
		rawDeps = append(rawDeps, strings.Fields(deps))

		return nil
	}); err != nil {
		return nil, err
	}

	// modules.dep names dependencies by path; resolve them once all paths are known.
	for i, name := range ix.Order {
		for _, p := range rawDeps[i] {
			dep, ok := byPath[p]
			if !ok {
				return nil, fmt.Errorf("error reading modules.dep: %s depends on %s, which is not listed", name, p)
			}

			ix.Modules[name].Deps = append(ix.Modules[name].Deps, dep)
		}
	}

	if err := eachLine(filepath.Join(dir, "modules.builtin"), false, func(line string) error {
		ix.Builtin[Name(line)] = true

		return nil
	}); err != nil {
		return nil, err
	}

	if err := eachLine(filepath.Join(dir, "modules.alias"), false, func(line string) error {
		f := strings.Fields(line)
		if len(f) == 3 && f[0] == "alias" && !strings.ContainsAny(f[1], "*?[") {
			ix.aliases[f[1]] = append(ix.aliases[f[1]], f[2])
		}

		return nil
	}); err != nil {
		return nil, err
	}

	if err := eachLine(filepath.Join(dir, "modules.softdep"), false, func(line string) error {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "softdep" {
			return nil
		}

		for _, dep := range f[2:] {
			if dep != "pre:" && dep != "post:" {
				ix.softdeps[Name(f[1])] = append(ix.softdeps[Name(f[1])], dep)
			}
		}

		return nil
	}); err != nil {
		return nil, err
	}

	return ix, nil
}

// resolve turns a softdep target (module name or exact alias) into loadable module names.
func (ix *Index) resolve(target string) []string {
	if _, ok := ix.Modules[Name(target)]; ok {
		return []string{Name(target)}
	}

	var names []string

	for _, n := range ix.aliases[target] {
		if _, ok := ix.Modules[Name(n)]; ok {
			names = append(names, Name(n))
		}
	}

	sort.Strings(names)

	return names
}

// eachLine calls fn for every non-empty, non-comment line of file. A missing optional
// file is skipped.
func eachLine(file string, required bool, fn func(string) error) error {
	f, err := os.Open(file)
	if err != nil {
		if !required && errors.Is(err, fs.ErrNotExist) {
			return nil
		}

		return fmt.Errorf("error opening %s: %w", file, err)
	}
	defer f.Close()

	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)

	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}

		if err := fn(line); err != nil {
			return fmt.Errorf("error reading %s: %w", file, err)
		}
	}

	if err := sc.Err(); err != nil {
		return fmt.Errorf("error reading %s: %w", file, err)
	}

	return nil
}
