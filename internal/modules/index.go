// Package modules loads the kernel modules a machine's hardware needs: it
// matches the modaliases under sysfs against modules.alias, resolves each
// module's dependencies from modules.dep and loads them with finit_module.
package modules

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Index is the parsed depmod output of one kernel release: which modules an
// alias names, which files a module and its dependencies live in, and which
// modules are built in. It is read-only after Open and safe to share.
type Index struct {
	dir string
	// aliases holds alias patterns bucketed by the bus before ':'
	// ("pci", "virtio"); patterns whose bus part is itself a glob ("acpi*")
	// sit in wild and are tried against every modalias.
	aliases map[string][]alias
	wild    []alias
	deps    map[string]moduleFile
	builtin map[string]bool
}

type alias struct {
	pattern string
	// literal is the pattern's prefix before its first metacharacter: a
	// cheap HasPrefix test rejects almost every pattern before match runs.
	literal string
	module  string
}

type moduleFile struct {
	path string   // relative to the modules directory
	deps []string // module names, as listed in modules.dep
}

// Open reads modules.alias, modules.dep and modules.builtin from dir (such
// as /lib/modules/6.1.0-57-amd64). A missing modules.builtin is treated as
// empty; the other two are required.
func Open(dir string) (*Index, error) {
	ix := &Index{
		dir:     dir,
		aliases: make(map[string][]alias),
		deps:    make(map[string]moduleFile),
		builtin: make(map[string]bool),
	}

	if err := readLines(filepath.Join(dir, "modules.dep"), ix.addDep); err != nil {
		return nil, err
	}

	if err := readLines(filepath.Join(dir, "modules.alias"), ix.addAlias); err != nil {
		return nil, err
	}

	err := readLines(filepath.Join(dir, "modules.builtin"), func(line string) {
		ix.builtin[Name(line)] = true
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}

	return ix, nil
}

// Dir returns the modules directory the index was read from.
func (ix *Index) Dir() string { return ix.dir }

// Name turns a module file path or a module name spelled with dashes into
// the kernel's name for it: "kernel/drivers/net/virtio_net.ko.xz" and
// "virtio-net" both become "virtio_net".
func Name(s string) string {
	s = filepath.Base(strings.TrimSpace(s))
	if i := strings.Index(s, ".ko"); i >= 0 {
		s = s[:i]
	}

	return strings.ReplaceAll(s, "-", "_")
}

func (ix *Index) addDep(line string) {
	file, rest, ok := strings.Cut(line, ":")
	if !ok {
		return
	}

	var deps []string
	for _, d := range strings.Fields(rest) {
		deps = append(deps, Name(d))
	}

	ix.deps[Name(file)] = moduleFile{path: strings.TrimSpace(file), deps: deps}
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

		mf, ok := ix.deps[n]
		if !ok {
			return fmt.Errorf("module %s: %w", n, ErrUnknownModule)
		}

		state[n] = 1

		// modules.dep lists the deepest dependency last, as modprobe loads
		// them in reverse; visit in that order too.
		for i := len(mf.deps) - 1; i >= 0; i-- {
			if err := visit(mf.deps[i], append(chain[:len(chain):len(chain)], n)); err != nil {
				return err
			}
		}

		state[n] = 2
		out = append(out, Module{Name: n, Path: filepath.Join(ix.dir, mf.path)})

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

// Module is one loadable module: its kernel name and its file.
type Module struct {
	Name string
	Path string
}

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
