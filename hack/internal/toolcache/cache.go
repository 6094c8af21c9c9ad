package toolcache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// DefaultKeep is how many keys per binary name the cache keeps.
const DefaultKeep = 2

// BuildFunc runs go build in dir with env added to the environment and args after
// "go build".
type BuildFunc func(ctx context.Context, dir string, env, args []string) error

// GoBuild runs "go build" in dir, its output on stdout and stderr.
func GoBuild(ctx context.Context, dir string, env, args []string) error {
	cmd := exec.CommandContext(ctx, "go", append([]string{"build"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout = os.Stdout
	cmd.Stderr = os.Stderr

	if err := cmd.Run(); err != nil {
		return fmt.Errorf("error running go build %s in %s: %w", strings.Join(args, " "), dir, err)
	}

	return nil
}

// Cache is a directory of built binaries.
type Cache struct {
	// Dir is the cache's root; binaries are under Dir/tools.
	Dir string
	// Keep is how many keys per name stay (DefaultKeep when 0).
	Keep int
	// GoEnv and GoBuild run the go command (the functions of this package when nil).
	GoEnv   GoEnvFunc
	GoBuild BuildFunc
	// Log receives a line when a build starts and when it waits for another one
	// (nothing when nil).
	Log io.Writer
	// Now is the clock that stamps a key's last use (time.Now when nil).
	Now func() time.Time
}

// DefaultDir is $ANVIL_CACHE_DIR, else anvil in the user's cache directory
// ($XDG_CACHE_HOME, else $HOME/.cache).
func DefaultDir() (string, error) {
	if d := os.Getenv("ANVIL_CACHE_DIR"); d != "" {
		return filepath.Abs(d)
	}

	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("error finding the cache directory (set ANVIL_CACHE_DIR): %w", err)
	}

	return filepath.Join(d, "anvil"), nil
}

// Result is what Install did.
type Result struct {
	Key    string
	Hit    bool   // the binary was in the cache
	Cached string // the binary's path in the cache
}

// Short is the key's first 12 hex digits, as printed.
func (r Result) Short() string {
	if len(r.Key) > 12 {
		return r.Key[:12]
	}

	return r.Key
}

// Install copies the build's binary to out: from the cache when its key is there, else
// built into the cache first. When the build fails, out is removed so that a binary of
// an older key does not stand in for it.
func (c *Cache) Install(ctx context.Context, b Build, out string) (Result, error) {
	if err := b.check(); err != nil {
		return Result{}, err
	}

	key, err := Key(ctx, b, c.goEnv())
	if err != nil {
		return Result{}, err
	}

	res := Result{Key: key}

	nameDir := filepath.Join(c.Dir, "tools", b.Name)
	keyDir := filepath.Join(nameDir, key)
	res.Cached = filepath.Join(keyDir, b.Name)

	lock, err := c.lock(keyDir)
	if err != nil {
		return res, err
	}

	defer lock.Close()

	res.Hit = exists(res.Cached)
	if !res.Hit {
		if c.Log != nil {
			fmt.Fprintf(c.Log, "toolcache: %s miss %s: building %s in %s\n", b.Name, res.Short(), b.Pkg, b.Module)
		}

		if err = c.build(ctx, b, keyDir, res.Cached); err != nil {
			_ = os.Remove(out)

			return res, err
		}
	}

	now := c.now()
	_ = os.Chtimes(res.Cached, now, now)
	_ = os.Chtimes(keyDir, now, now)

	if err = place(res.Cached, out); err != nil {
		return res, err
	}

	// The key's own lock is held: eviction skips it.
	c.evict(nameDir, key)

	return res, nil
}

func (b Build) check() error {
	switch {
	case b.Name == "" || strings.ContainsAny(b.Name, `/\`) || strings.HasPrefix(b.Name, "."):
		return fmt.Errorf("invalid binary name %q", b.Name)
	case b.Module == "":
		return errors.New("no tools module")
	case b.Pkg == "":
		return errors.New("no package")
	}

	for _, f := range b.Flags {
		if f == "-o" || strings.HasPrefix(f, "-o=") || f == "--o" || strings.HasPrefix(f, "--o=") {
			return fmt.Errorf("go build flag %q: the cache chooses the output", f)
		}
	}

	for _, e := range b.Env {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			return fmt.Errorf("environment setting %q is not KEY=VALUE", e)
		}
	}

	return nil
}

// build runs go build into a temporary directory in keyDir and renames its output to
// cached; the caller holds keyDir's lock.
func (c *Cache) build(ctx context.Context, b Build, keyDir, cached string) error {
	removeTemps(keyDir)

	tmp, err := os.MkdirTemp(keyDir, ".tmp-")
	if err != nil {
		return fmt.Errorf("error making a build directory in the cache: %w", err)
	}

	defer os.RemoveAll(tmp)

	bin := filepath.Join(tmp, b.Name)

	args := slices.Concat(b.Flags, []string{"-o", bin, b.Pkg})
	if err = c.goBuild()(ctx, b.Module, b.Env, args); err != nil {
		return err
	}

	if err = os.Rename(bin, cached); err != nil {
		return fmt.Errorf("error installing %s in the cache: %w", b.Name, err)
	}

	return nil
}

// removeTemps removes build directories that killed builds left in keyDir.
func removeTemps(keyDir string) {
	entries, _ := os.ReadDir(keyDir)

	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".tmp-") {
			_ = os.RemoveAll(filepath.Join(keyDir, e.Name()))
		}
	}
}

// lock takes keyDir's lock (keyDir/.lock, made with keyDir if missing), waiting for
// another process or goroutine holding it; closing the file releases it. When eviction
// removed the lock file while this one waited for it, it starts again on the new one.
func (c *Cache) lock(keyDir string) (*os.File, error) {
	path := filepath.Join(keyDir, ".lock")
	said := false

	for {
		if err := os.MkdirAll(keyDir, 0o755); err != nil {
			return nil, fmt.Errorf("error making the cache directory: %w", err)
		}

		f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			return nil, fmt.Errorf("error opening the cache lock: %w", err)
		}

		if err = flock(f, syscall.LOCK_EX|syscall.LOCK_NB); errors.Is(err, syscall.EWOULDBLOCK) {
			if !said && c.Log != nil {
				fmt.Fprintf(c.Log, "toolcache: waiting for another build of %s\n", keyDir)

				said = true
			}

			err = flock(f, syscall.LOCK_EX)
		}

		if err != nil {
			f.Close()

			return nil, fmt.Errorf("error locking %s: %w", path, err)
		}

		held, err1 := f.Stat()
		now, err2 := os.Stat(path)

		if err1 == nil && err2 == nil && os.SameFile(held, now) {
			return f, nil
		}

		f.Close()
	}
}

func flock(f *os.File, how int) error {
	for {
		err := syscall.Flock(int(f.Fd()), how)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

// evict removes the keys of nameDir beyond the newest Keep by last use, keep always
// staying; a key whose lock another build holds stays too.
func (c *Cache) evict(nameDir, keep string) {
	entries, err := os.ReadDir(nameDir)
	if err != nil {
		return
	}

	type key struct {
		name string
		used time.Time
	}

	var others []key

	for _, e := range entries {
		if !e.IsDir() || e.Name() == keep {
			continue
		}

		info, err := e.Info()
		if err != nil {
			continue
		}

		others = append(others, key{e.Name(), info.ModTime()})
	}

	slices.SortFunc(others, func(a, b key) int { return b.used.Compare(a.used) })

	n := c.Keep
	if n <= 0 {
		n = DefaultKeep
	}

	for i, k := range others {
		if i < n-1 {
			continue
		}

		dir := filepath.Join(nameDir, k.name)

		f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			continue
		}

		if flock(f, syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			_ = os.RemoveAll(dir)
		}

		f.Close()
	}
}

func (c *Cache) goEnv() GoEnvFunc {
	if c.GoEnv != nil {
		return c.GoEnv
	}

	return GoEnv
}

func (c *Cache) goBuild() BuildFunc {
	if c.GoBuild != nil {
		return c.GoBuild
	}

	return GoBuild
}

func (c *Cache) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}

	return time.Now()
}

func exists(path string) bool {
	info, err := os.Stat(path)

	return err == nil && info.Mode().IsRegular()
}
