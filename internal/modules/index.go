// Package modules reads a kernel's module index (depmod's modules.dep,
// modules.alias, modules.builtin, modules.softdep) and loads the modules a
// machine's hardware needs: it matches the modaliases under sysfs against
// modules.alias, resolves each module's dependencies from modules.dep and
// loads them with finit_module. The imager picks the initramfs's modules from
// the same index.
package modules

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// Index is the parsed depmod output of one kernel release: which modules an
// alias names, which files a module and its dependencies live in, which
// modules are built in, and which soft dependencies modules declare. It is
// read-only after Open and safe to share.
type Index struct {
	dir string
	// aliases holds alias patterns bucketed by the bus before ':'
	// ("pci", "virtio"); patterns whose bus part is itself a glob ("acpi*")
	// sit in wild and are tried against every modalias.
	aliases map[string][]alias
	wild    []alias
	// modules are in modules.dep order, byName indexes them.
	modules  []Module
	byName   map[string]int
	builtin  map[string]bool
	softdeps map[string][]string
}

type alias struct {
	pattern string
	// literal is the pattern's prefix before its first metacharacter: a
	// cheap HasPrefix test rejects almost every pattern before match runs.
	literal string
	module  string
}

// Module is one loadable module as modules.dep lists it.
type Module struct {
	// Name is the kernel's name for it ("virtio_net").
	Name string
	// Path is its file relative to the modules directory, as modules.dep
	// spells it ("kernel/drivers/net/virtio_net.ko.xz").
	Path string
	// File is Path under the index's directory: the file to open.
	File string
	// Deps names the modules it needs, in modules.dep order (the deepest
	// last).
	Deps []string
}

// Open reads modules.dep, modules.alias and, where present, modules.builtin
// and modules.softdep from dir (such as /lib/modules/6.1.0-57-amd64). Lines
// it cannot read are skipped: a module they name is then unknown where it is
// asked for (ErrUnknownModule), which the caller can report.
func Open(dir string) (*Index, error) {
	ix := &Index{
		dir:      dir,
		aliases:  make(map[string][]alias),
		byName:   make(map[string]int),
		builtin:  make(map[string]bool),
		softdeps: make(map[string][]string),
	}

	if err := readLines(filepath.Join(dir, "modules.dep"), ix.addDep); err != nil {
		return nil, err
	}

	if err := readLines(filepath.Join(dir, "modules.alias"), ix.addAlias); err != nil {
		return nil, err
	}

	for file, add := range map[string]func(string){
		"modules.builtin": func(line string) { ix.builtin[Name(line)] = true },
		"modules.softdep": ix.addSoftdep,
	} {
		if err := readLines(filepath.Join(dir, file), add); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}

	return ix, nil
}

// Dir returns the modules directory the index was read from.
func (ix *Index) Dir() string { return ix.dir }

// Len is the number of loadable modules.
func (ix *Index) Len() int { return len(ix.modules) }

// Modules yields the loadable modules in modules.dep order.
func (ix *Index) Modules() iter.Seq[Module] {
	return func(yield func(Module) bool) {
		for _, m := range ix.modules {
			if !yield(m) {
				return
			}
		}
	}
}

// Module returns the loadable module called name (any spelling Name takes).
func (ix *Index) Module(name string) (Module, bool) {
	i, ok := ix.byName[Name(name)]
	if !ok {
		return Module{}, false
	}

	return ix.modules[i], true
}

// Name turns a module file path or a module name spelled with dashes into
// the kernel's name for it: "kernel/drivers/net/virtio_net.ko.xz" and
// "virtio-net" both become "virtio_net".
func Name(s string) string {
	s = path.Base(filepath.ToSlash(strings.TrimSpace(s)))

	for _, ext := range compressions {
		if strings.HasSuffix(s, ".ko"+ext) {
			s = strings.TrimSuffix(s, ext)

			break
		}
	}

	return strings.ReplaceAll(strings.TrimSuffix(s, ".ko"), "-", "_")
}

func (ix *Index) addDep(line string) {
	file, rest, ok := strings.Cut(line, ":")
	if !ok {
		return
	}

	file = strings.TrimSpace(file)
	m := Module{Name: Name(file), Path: file, File: filepath.Join(ix.dir, filepath.FromSlash(file))}

	for _, d := range strings.Fields(rest) {
		m.Deps = append(m.Deps, Name(d))
	}

	if i, dup := ix.byName[m.Name]; dup {
		ix.modules[i] = m

		return
	}

	ix.byName[m.Name] = len(ix.modules)
	ix.modules = append(ix.modules, m)
}

func (ix *Index) addAlias(line string) {
	f := strings.Fields(line)
	if len(f) != 3 || f[0] != "alias" {
		return
	}

	a := alias{pattern: f[1], module: Name(f[2])}
	a.literal = a.pattern
	if i := strings.IndexAny(a.pattern, "*?["); i >= 0 {
		a.literal = a.pattern[:i]
	}

	bus, _, _ := strings.Cut(a.pattern, ":")
	if strings.ContainsAny(bus, "*?[") {
		ix.wild = append(ix.wild, a)

		return
	}

	ix.aliases[bus] = append(ix.aliases[bus], a)
}

// addSoftdep reads "softdep <module> pre: a b post: c".
func (ix *Index) addSoftdep(line string) {
	f := strings.Fields(line)
	if len(f) < 2 || f[0] != "softdep" {
		return
	}

	name := Name(f[1])

	for _, dep := range f[2:] {
		if dep != "pre:" && dep != "post:" {
			ix.softdeps[name] = append(ix.softdeps[name], dep)
		}
	}
}

// Softdeps returns the soft dependencies modules.softdep gives the module, pre:
// and post: alike, as written there: module names or aliases (see Resolve).
func (ix *Index) Softdeps(name string) []string { return ix.softdeps[Name(name)] }

// Resolve turns a module name or an alias, as a soft dependency names it, into
// the loadable modules it stands for, sorted: modprobe takes either.
func (ix *Index) Resolve(target string) []string {
	if m, ok := ix.Module(target); ok {
		return []string{m.Name}
	}

	var names []string

	for _, n := range ix.Match(target) {
		if _, ok := ix.byName[n]; ok {
			names = append(names, n)
		}
	}

	slices.Sort(names)

	return names
}

// Match returns the modules whose alias patterns match modalias, each once,
// in modules.alias order. Like modprobe, every match is returned: a device
// may want more than one module.
func (ix *Index) Match(modalias string) []string {
	bus, _, _ := strings.Cut(modalias, ":")

	var out []string

	seen := map[string]bool{}
	try := func(as []alias) {
		for _, a := range as {
			if seen[a.module] || !strings.HasPrefix(modalias, a.literal) || !match(a.pattern, modalias) {
				continue
			}

			seen[a.module] = true
			out = append(out, a.module)
		}
	}

	try(ix.aliases[bus])
	try(ix.wild)

	return out
}

// Builtin reports whether the module is compiled into the kernel.
func (ix *Index) Builtin(name string) bool { return ix.builtin[Name(name)] }

// Closure returns the modules to load for name, dependencies first, each
// once, the module itself last. Built-in modules are left out; a module
// neither in modules.dep nor built in is an error.
func (ix *Index) Closure(name string) ([]Module, error) {
	var out []Module

	state := map[string]int{} // 1 visiting, 2 done

	var visit func(n string, chain []string) error
	visit = func(n string, chain []string) error {
		switch state[n] {
		case 2:
			return nil
		case 1:
			// depmod refuses cycles; a hand-made file could still hold one.
			return fmt.Errorf("dependency cycle: %s -> %s", strings.Join(chain, " -> "), n)
		}

		if ix.builtin[n] {
			state[n] = 2

			return nil
		}

		i, ok := ix.byName[n]
		if !ok {
			return fmt.Errorf("module %s: %w", n, ErrUnknownModule)
		}

		m := ix.modules[i]
		state[n] = 1

		// modules.dep lists the deepest dependency last, as modprobe loads
		// them in reverse; visit in that order too.
		for i := len(m.Deps) - 1; i >= 0; i-- {
			if err := visit(m.Deps[i], append(chain[:len(chain):len(chain)], n)); err != nil {
				return err
			}
		}

		state[n] = 2
		out = append(out, m)

		return nil
	}

	if err := visit(Name(name), nil); err != nil {
		return nil, err
	}

	return out, nil
}

// ErrUnknownModule is returned for a module neither in modules.dep nor
// built in.
var ErrUnknownModule = errors.New("not in modules.dep nor modules.builtin")

func readLines(path string, fn func(string)) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	defer f.Close()

	if err := scanLines(f, fn); err != nil {
		return fmt.Errorf("reading %s: %w", path, err)
	}

	return nil
}

func scanLines(r io.Reader, fn func(string)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)

	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}

		fn(line)
	}

	return sc.Err()
}
