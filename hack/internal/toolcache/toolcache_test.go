package toolcache_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/hack/internal/toolcache"
)

// fakeGoEnv answers go env with fixed values, CGO_ENABLED taken from env as go does.
func fakeGoEnv(_ context.Context, _ string, env, vars []string) (map[string]string, error) {
	values := map[string]string{"GOVERSION": "go1.99.0", "GOOS": "linux", "GOARCH": "amd64", "CGO_ENABLED": "1"}

	for _, e := range env {
		k, v, _ := strings.Cut(e, "=")
		values[k] = v
	}

	out := map[string]string{}
	for _, v := range vars {
		out[v] = values[v]
	}

	return out, nil
}

// fakeBuilder writes a "binary" naming its arguments and counts the builds.
type fakeBuilder struct {
	builds atomic.Int32
	delay  time.Duration
	fail   bool
}

func (f *fakeBuilder) build(_ context.Context, dir string, env, args []string) error {
	f.builds.Add(1)
	time.Sleep(f.delay)

	if f.fail {
		return os.ErrInvalid
	}

	i := slices.Index(args, "-o")

	return os.WriteFile(args[i+1], []byte(dir+" "+strings.Join(env, " ")+" "+strings.Join(args, " ")), 0o755)
}

// module makes a tools module in a temporary directory.
func module(t *testing.T, gomod, gosum string) string {
	t.Helper()

	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.sum"), []byte(gosum), 0o644))

	return dir
}

func newCache(t *testing.T, fb *fakeBuilder) *toolcache.Cache {
	t.Helper()

	// A clock that moves a second per call: the keys' last uses are told apart.
	var (
		mu  sync.Mutex
		now = time.Unix(1_700_000_000, 0)
	)

	return &toolcache.Cache{
		Dir:     t.TempDir(),
		GoEnv:   fakeGoEnv,
		GoBuild: fb.build,
		Now: func() time.Time {
			mu.Lock()
			defer mu.Unlock()

			now = now.Add(time.Second)

			return now
		},
	}
}

func TestKey(t *testing.T) {
	t.Parallel()

	ctx := t.Context()
	dir := module(t, "module m\n", "a v1.0.0 h1:x\n")
	base := toolcache.Build{Name: "tool", Module: dir, Pkg: "example.com/a/cmd/tool", Flags: []string{"-trimpath", "-ldflags=-s -w"}}

	key := func(b toolcache.Build) string {
		t.Helper()

		k, err := toolcache.Key(ctx, b, fakeGoEnv)
		require.NoError(t, err)

		return k
	}

	k0 := key(base)
	assert.Len(t, k0, 64)
	assert.Equal(t, k0, key(base), "the same build, the same key")

	// The same module's files in another directory (another clone): the same key.
	other := module(t, "module m\n", "a v1.0.0 h1:x\n")
	moved := base
	moved.Module = other
	assert.Equal(t, k0, key(moved), "the module's path is not part of the key")

	for _, tc := range []struct {
		name   string
		change func(b *toolcache.Build)
	}{
		{"go.sum", func(b *toolcache.Build) { b.Module = module(t, "module m\n", "a v1.0.1 h1:y\n") }},
		{"go.mod", func(b *toolcache.Build) { b.Module = module(t, "module m\n\ngo 1.26\n", "a v1.0.0 h1:x\n") }},
		{"flags", func(b *toolcache.Build) { b.Flags = []string{"-trimpath", "-ldflags=-s"} }},
		{"flag order", func(b *toolcache.Build) { b.Flags = []string{"-ldflags=-s -w", "-trimpath"} }},
		{"tags", func(b *toolcache.Build) { b.Flags = append(slices.Clone(b.Flags), "-tags", "no_cri") }},
		{"package", func(b *toolcache.Build) { b.Pkg = "example.com/a/cmd/other" }},
		{"CGO_ENABLED", func(b *toolcache.Build) { b.Env = []string{"CGO_ENABLED=0"} }},
		{"GOARCH", func(b *toolcache.Build) { b.Env = []string{"GOARCH=arm64"} }},
		{"other environment", func(b *toolcache.Build) { b.Env = []string{"GOFIPS140=latest"} }},
		{"name", func(b *toolcache.Build) { b.Name = "tool2" }},
		{"source in the module", func(b *toolcache.Build) {
			d := module(t, "module m\n", "a v1.0.0 h1:x\n")
			require.NoError(t, os.MkdirAll(filepath.Join(d, "cmd", "x"), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(d, "cmd", "x", "main.go"), []byte("package main\n"), 0o644))
			b.Module = d
		}},
	} {
		b := base
		tc.change(&b)
		assert.NotEqual(t, k0, key(b), "a change of %s changes the key", tc.name)
	}

	// CGO_ENABLED=0 set for the build or in the caller's environment: the same key.
	withEnv := base
	withEnv.Env = []string{"CGO_ENABLED=0"}

	fromCaller, err := toolcache.Key(ctx, base, func(ctx context.Context, dir string, env, vars []string) (map[string]string, error) {
		return fakeGoEnv(ctx, dir, append(env, "CGO_ENABLED=0"), vars)
	})
	require.NoError(t, err)
	assert.Equal(t, key(withEnv), fromCaller)

	// Hidden files (an editor's swap file) are not part of the module.
	require.NoError(t, os.WriteFile(filepath.Join(other, ".go.mod.swp"), []byte("x"), 0o644))
	assert.Equal(t, k0, key(moved))

	_, err = toolcache.Key(ctx, toolcache.Build{Name: "tool", Module: t.TempDir(), Pkg: "p"}, fakeGoEnv)
	assert.Error(t, err, "a directory without go.mod")
}

func TestInstallHit(t *testing.T) {
	t.Parallel()

	fb := &fakeBuilder{}
	c := newCache(t, fb)
	b := toolcache.Build{Name: "tool", Module: module(t, "module m\n", ""), Pkg: "p", Flags: []string{"-ldflags=-s -w -X a.b=c d"}, Env: []string{"CGO_ENABLED=0"}}
	out := filepath.Join(t.TempDir(), "bin", "tool")

	res, err := c.Install(t.Context(), b, out)
	require.NoError(t, err)
	assert.False(t, res.Hit)
	assert.Equal(t, int32(1), fb.builds.Load())
	assert.Equal(t, filepath.Join(c.Dir, "tools", "tool", res.Key, "tool"), res.Cached)

	got, err := os.ReadFile(out)
	require.NoError(t, err)
	assert.Contains(t, string(got), "CGO_ENABLED=0 -ldflags=-s -w -X a.b=c d -o ", "env and flags passed intact")

	// A hit does not build, also when out is gone or is another file.
	require.NoError(t, os.Remove(out))

	res2, err := c.Install(t.Context(), b, out)
	require.NoError(t, err)
	assert.True(t, res2.Hit)
	assert.Equal(t, res.Key, res2.Key)
	assert.Equal(t, int32(1), fb.builds.Load())
	assert.FileExists(t, out)

	require.NoError(t, os.WriteFile(out, []byte("stale"), 0o755))

	res3, err := c.Install(t.Context(), b, out)
	require.NoError(t, err)
	assert.True(t, res3.Hit)

	got3, err := os.ReadFile(out)
	require.NoError(t, err)
	assert.Equal(t, got, got3)

	// A write into out did not reach the cache; installing again leaves no temporary file.
	_, err = c.Install(t.Context(), b, out)
	require.NoError(t, err)

	entries, err := os.ReadDir(filepath.Dir(out))
	require.NoError(t, err)
	assert.Len(t, entries, 1, "only the binary in out's directory")
	assert.Equal(t, int32(1), fb.builds.Load())

	// A change of go.sum is a miss.
	b.Module = module(t, "module m\n", "x v1 h1:y\n")

	res4, err := c.Install(t.Context(), b, out)
	require.NoError(t, err)
	assert.False(t, res4.Hit)
	assert.Equal(t, int32(2), fb.builds.Load())
}

func TestInstallFailure(t *testing.T) {
	t.Parallel()

	fb := &fakeBuilder{fail: true}
	c := newCache(t, fb)
	b := toolcache.Build{Name: "tool", Module: module(t, "module m\n", ""), Pkg: "p"}
	out := filepath.Join(t.TempDir(), "tool")
	require.NoError(t, os.WriteFile(out, []byte("a binary of an older key"), 0o755))

	res, err := c.Install(t.Context(), b, out)
	require.Error(t, err)
	assert.NoFileExists(t, out, "a stale binary does not stand in for a failed build")
	assert.NoFileExists(t, res.Cached)

	entries, err := os.ReadDir(filepath.Dir(res.Cached))
	require.NoError(t, err)

	for _, e := range entries {
		assert.Equal(t, ".lock", e.Name(), "no temporary build left in the cache")
	}

	// The next attempt builds again.
	fb.fail = false

	res, err = c.Install(t.Context(), b, out)
	require.NoError(t, err)
	assert.False(t, res.Hit)
	assert.FileExists(t, out)
}

func TestInstallRejects(t *testing.T) {
	t.Parallel()

	c := newCache(t, &fakeBuilder{})
	mod := module(t, "module m\n", "")
	out := filepath.Join(t.TempDir(), "tool")

	for _, b := range []toolcache.Build{
		{Name: "tool", Module: mod, Pkg: "p", Flags: []string{"-o", "x"}},
		{Name: "tool", Module: mod, Pkg: "p", Flags: []string{"-o=x"}},
		{Name: "../tool", Module: mod, Pkg: "p"},
		{Name: "tool", Module: mod, Pkg: ""},
		{Name: "tool", Module: mod, Pkg: "p", Env: []string{"CGO_ENABLED"}},
	} {
		_, err := c.Install(t.Context(), b, out)
		assert.Error(t, err, "%+v", b)
	}
}

func TestEviction(t *testing.T) {
	t.Parallel()

	fb := &fakeBuilder{}
	c := newCache(t, fb)
	mod := module(t, "module m\n", "")
	out := filepath.Join(t.TempDir(), "tool")

	install := func(flag string) string {
		t.Helper()

		res, err := c.Install(t.Context(), toolcache.Build{Name: "tool", Module: mod, Pkg: "p", Flags: []string{flag}}, out)
		require.NoError(t, err)

		return res.Key
	}

	keys := func() []string {
		t.Helper()

		entries, err := os.ReadDir(filepath.Join(c.Dir, "tools", "tool"))
		require.NoError(t, err)

		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}

		slices.Sort(names)

		return names
	}

	sorted := func(s ...string) []string {
		slices.Sort(s)

		return s
	}

	a := install("-a")
	b := install("-b")
	assert.Equal(t, sorted(a, b), keys())

	// A use of a makes b the oldest: c evicts b.
	install("-a")

	k := install("-c")
	assert.Equal(t, sorted(a, k), keys())
	assert.Equal(t, int32(3), fb.builds.Load())

	// Another name's keys are its own.
	_, err := c.Install(t.Context(), toolcache.Build{Name: "other", Module: mod, Pkg: "p"}, filepath.Join(t.TempDir(), "other"))
	require.NoError(t, err)
	assert.Equal(t, sorted(a, k), keys())

	// A key whose lock another build holds is not evicted; once free, it is.
	c.Keep = 1

	f, err := os.Open(filepath.Join(c.Dir, "tools", "tool", k, ".lock"))
	require.NoError(t, err)
	require.NoError(t, syscall.Flock(int(f.Fd()), syscall.LOCK_EX))

	install("-a")
	assert.Equal(t, sorted(a, k), keys())

	f.Close()
	install("-a")
	assert.Equal(t, []string{a}, keys())
}

func TestConcurrentBuildsOfOneKey(t *testing.T) {
	t.Parallel()

	fb := &fakeBuilder{delay: 200 * time.Millisecond}
	c := newCache(t, fb)
	b := toolcache.Build{Name: "tool", Module: module(t, "module m\n", ""), Pkg: "p"}
	dir := t.TempDir()

	var (
		wg   sync.WaitGroup
		hits atomic.Int32
	)

	for i := range 4 {
		wg.Go(func() {
			res, err := c.Install(t.Context(), b, filepath.Join(dir, "tool"+string(rune('0'+i))))
			assert.NoError(t, err)

			if res.Hit {
				hits.Add(1)
			}
		})
	}

	wg.Wait()
	assert.Equal(t, int32(1), fb.builds.Load(), "one build, the others wait and hit")
	assert.Equal(t, int32(3), hits.Load())
}

// TestInstallGoBuild builds a real binary with go build: ldflags with spaces and quotes
// reach the linker intact, and a second install is a hit. Not parallel: a child forked
// while another test holds a key's lock holds it too until it execs (long on a loaded
// machine), and that test's eviction would find the key busy.
func TestInstallGoBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go build")
	}

	mod := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(mod, "go.mod"), []byte("module example.com/hello\n\ngo 1.22\n"), 0o644))
	require.NoError(t, os.MkdirAll(filepath.Join(mod, "cmd", "hello"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(mod, "cmd", "hello", "main.go"), []byte(`package main

var greeting = "unset"

func main() { println(greeting) }
`), 0o644))

	c := &toolcache.Cache{Dir: t.TempDir()}
	b := toolcache.Build{
		Name: "hello", Module: mod, Pkg: "./cmd/hello", Env: []string{"CGO_ENABLED=0"},
		Flags: []string{"-trimpath", "-ldflags=-s -w -X 'main.greeting=hello there'"},
	}
	out := filepath.Join(t.TempDir(), "hello")

	res, err := c.Install(t.Context(), b, out)
	require.NoError(t, err)
	require.False(t, res.Hit)

	got, err := exec.Command(out).CombinedOutput()
	require.NoError(t, err, "%s", got)
	assert.Equal(t, "hello there\n", string(got))

	res, err = c.Install(t.Context(), b, out)
	require.NoError(t, err)
	assert.True(t, res.Hit)
}
