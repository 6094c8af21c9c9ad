package main

import (
	"errors"
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/anvil-metal/anvil/internal/modules"
)

// loadAll loads every module of the index in dir with l, each once, its dependencies
// first. A module that fails (or whose dependencies the index does not know) is reported
// and the rest still load: Talos says what it then misses. One already loaded (EEXIST)
// counts as loaded. It returns how many modules are loaded and how many failed.
func loadAll(dir string, l modules.Loader, logf func(string, ...any)) (loaded, failed int, err error) {
	ix, err := modules.Open(dir)
	if err != nil {
		return 0, 0, fmt.Errorf("error reading the modules in %s: %w", dir, err)
	}

	done := map[string]bool{}

	for m := range ix.Modules() {
		closure, err := ix.Closure(m.Name)
		if err != nil {
			if !done[m.Name] {
				done[m.Name] = true

				logf("talos-preinit: %s: %v", m.Name, err)

				failed++
			}

			continue
		}

		for _, dep := range closure {
			if done[dep.Name] {
				continue
			}

			done[dep.Name] = true

			if err := l.Load(dep); err != nil && !errors.Is(err, unix.EEXIST) {
				logf("talos-preinit: loading %s: %v", filepath.Base(dep.File), err)

				failed++

				continue
			}

			loaded++
		}
	}

	return loaded, failed, nil
}
