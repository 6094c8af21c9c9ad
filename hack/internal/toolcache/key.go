// Package toolcache keeps binaries built from Go tools modules (hack/tools/<module>) in a
// cache outside the clone, so that a fresh clone on the same machine copies them instead
// of linking them again (Omni takes minutes to link even with a warm Go build cache).
//
// A binary is stored under a key, the SHA-256 of everything its build depends on that
// the Go build cache does not see from outside: the tools module's files (go.mod, go.sum
// and any source kept there; their contents and paths inside the module, never the
// module's own path, which differs between clones), the Go toolchain and target (go env:
// GOVERSION, GOOS, GOARCH, CGO_ENABLED, …, as the build sees them, whether set for it or
// in the caller's environment), the package, the go build flags and any other
// environment set for the build. The layout is
//
//	<dir>/tools/<name>/<key>/<name>
//
// written atomically (built in a temporary directory beside it, then renamed), under a
// lock per key so that two builds of the same key wait for one another; only the
// newest Keep keys per name (by last use) stay.
package toolcache

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// Build is one binary built from a tools module.
type Build struct {
	// Name is the binary's name in the cache (and usually its name in the clone).
	Name string
	// Module is the tools module's directory: go build runs there.
	Module string
	// Pkg is the package built: an import path, or ./dir inside the module.
	Pkg string
	// Flags are go build's flags, each one argument as go build receives it
	// ("-ldflags=-s -w"); never -o.
	Flags []string
	// Env are KEY=VALUE settings added to the environment of go build (CGO_ENABLED=0).
	Env []string
}

// GoEnvVars are the go env variables in a key: the toolchain, the target and what
// changes the code it makes. GOWORK and the cache paths are left out (paths of this
// machine or clone).
var GoEnvVars = []string{
	"GOVERSION", "GOOS", "GOARCH", "GOAMD64", "GOARM", "GOARM64", "GOEXPERIMENT", "GOFLAGS",
	"CGO_ENABLED", "CC", "CGO_CFLAGS", "CGO_LDFLAGS",
}

// GoEnvFunc returns the values of vars as go env reports them in dir with env added to
// the environment.
type GoEnvFunc func(ctx context.Context, dir string, env, vars []string) (map[string]string, error)

// GoEnv runs "go env -json" in dir.
func GoEnv(ctx context.Context, dir string, env, vars []string) (map[string]string, error) {
	cmd := exec.CommandContext(ctx, "go", append([]string{"env", "-json"}, vars...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)

	var stderr bytes.Buffer

	cmd.Stderr = &stderr

	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("error running go env in %s: %w: %s", dir, err, strings.TrimSpace(stderr.String()))
	}

	values := map[string]string{}
	if err = json.Unmarshal(out, &values); err != nil {
		return nil, fmt.Errorf("error parsing go env's output: %w", err)
	}

	return values, nil
}

// Key is the build's cache key, in hex.
func Key(ctx context.Context, b Build, goEnv GoEnvFunc) (string, error) {
	h := sha256.New()

	fmt.Fprintf(h, "toolcache key v1\nname %q\npkg %q\n", b.Name, b.Pkg)

	for _, f := range b.Flags {
		fmt.Fprintf(h, "flag %q\n", f)
	}

	// A go env variable set for the build counts by the value go env reports, as when it
	// comes from the caller's environment: the same build, the same key.
	for _, e := range b.Env {
		if k, _, _ := strings.Cut(e, "="); !slices.Contains(GoEnvVars, k) {
			fmt.Fprintf(h, "setenv %q\n", e)
		}
	}

	values, err := goEnv(ctx, b.Module, b.Env, GoEnvVars)
	if err != nil {
		return "", err
	}

	for _, v := range GoEnvVars {
		fmt.Fprintf(h, "goenv %s=%q\n", v, values[v])
	}

	if err = hashModule(h, b.Module); err != nil {
		return "", err
	}

	return hex.EncodeToString(h.Sum(nil)), nil
}

// hashModule writes the module's files to h, each as its path inside the module, its
// length and its contents, in path order. Hidden files and directories are skipped, and
// a nested module (a directory with its own go.mod) is not part of this one.
func hashModule(h interface{ Write([]byte) (int, error) }, dir string) error {
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		return fmt.Errorf("error reading the tools module %s: %w", dir, err)
	}

	var files []string

	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}

		if path != dir && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}

			return nil
		}

		if d.IsDir() {
			if path != dir {
				if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
					return filepath.SkipDir
				}
			}

			return nil
		}

		if d.Type().IsRegular() {
			files = append(files, path)
		}

		return nil
	})
	if err != nil {
		return fmt.Errorf("error listing the tools module %s: %w", dir, err)
	}

	slices.Sort(files)

	for _, path := range files {
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("error reading %s: %w", path, err)
		}

		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return fmt.Errorf("error naming %s in its module: %w", path, err)
		}

		fmt.Fprintf(h, "file %q %d\n", filepath.ToSlash(rel), len(b))
		_, _ = h.Write(b)
	}

	return nil
}
