package talosbuild

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// static is a static Go program built once for the package's tests, in a directory
// TestMain removes.
var static struct {
	once      sync.Once
	dir, path string
	out       []byte
	err       error
}

func TestMain(m *testing.M) {
	code := m.Run()

	if static.dir != "" {
		os.RemoveAll(static.dir)
	}

	os.Exit(code)
}

// staticProgram is a static Go program (it needs no libraries): what the fake userland's
// programs are.
func staticProgram(t *testing.T) []byte {
	t.Helper()

	if testing.Short() {
		t.Skip("builds a Go program")
	}

	static.once.Do(func() {
		if static.dir, static.err = os.MkdirTemp("", "talosbuild-test-"); static.err != nil {
			return
		}

		src := filepath.Join(static.dir, "src")
		static.path = filepath.Join(static.dir, "static")

		for name, content := range map[string]string{
			"go.mod": "module static\n\ngo 1.22\n", "main.go": "package main\n\nfunc main() {}\n",
		} {
			if static.err = os.MkdirAll(src, 0o755); static.err == nil {
				static.err = os.WriteFile(filepath.Join(src, name), []byte(content), 0o644)
			}

			if static.err != nil {
				return
			}
		}

		cmd := exec.Command("go", "build", "-trimpath", "-o", static.path, ".")
		cmd.Dir = src
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64", "GOWORK=off", "GOFLAGS=")
		static.out, static.err = cmd.CombinedOutput()
	})

	require.NoError(t, static.err, "building a static program: %s", static.out)

	b, err := os.ReadFile(static.path)
	require.NoError(t, err)

	return b
}

// talosSource lays out the files talosLayout reads from fake Talos and machinery modules,
// each holding its own path: directories named as the module cache names them.
func talosSource(t *testing.T) (talos, machinery string) {
	t.Helper()

	root := t.TempDir()
	talos = filepath.Join(root, "talos@v1.13.9")
	machinery = filepath.Join(root, "machinery@v1.13.9")

	for _, f := range talosFiles {
		p := filepath.Join(talos, filepath.FromSlash(f.from))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte("talos:"+f.from), 0o600)) // the module cache's files are read-only
	}

	osrel := filepath.Join(machinery, "version", "os-release")
	require.NoError(t, os.MkdirAll(filepath.Dir(osrel), 0o755))
	require.NoError(t, os.WriteFile(osrel, []byte("NAME=\"Talos\"\nVERSION_ID=v1.13.9\n"), 0o444))

	return talos, machinery
}

// TestTalosLayout: Talos' own files from its module, its empty files, links and
// directories, as its Dockerfile lays them over the packages.
func TestTalosLayout(t *testing.T) {
	t.Parallel()

	talos, machinery := talosSource(t)
	root := tree{root: t.TempDir()}

	require.NoError(t, fhs(root))
	require.NoError(t, talosLayout(root, Options{TalosSource: talos, MachinerySource: machinery}))

	want := map[string]kind{
		"/etc/os-release": file("NAME=\"Talos\"\nVERSION_ID=v1.13.9\n", 0o644),
		// Empty: Talos writes them at boot (the extensions' list, resolv.conf, hosts…).
		"/etc/extensions.yaml": file("", 0o644), "/etc/resolv.conf": file("", 0o644), "/etc/hosts": file("", 0o644),
		"/etc/machine-id": file("", 0o644), "/etc/cri/conf.d/cri.toml": file("", 0o644),
		"/etc/cri/conf.d/01-registries.part": file("", 0o644), "/etc/cri/conf.d/20-customization.part": file("", 0o644),
		"/etc/cri/conf.d/base-spec.json": file("", 0o644), "/etc/ssl/certs/ca-certificates.crt": file("", 0o644),
		"/etc/selinux/targeted/contexts/files/file_contexts": file("", 0o644),
		"/etc/iscsi/initiatorname.iscsi":                     file("", 0o644), "/etc/nvme/hostid": file("", 0o644), "/etc/nvme/hostnqn": file("", 0o644),
		"/etc/localtime":                   link("/usr/share/zoneinfo/Etc/UTC"),
		"/etc/ssl/certs/ca-certificates":   link("ca-certificates.crt"),
		"/etc/pki":                         link("/etc/ssl"),
		"/usr/share/ca-certificates":       link("/etc/ssl"),
		"/usr/local/share/ca-certificates": link("/etc/ssl"),
		"/etc/ca-certificates":             link("/etc/ssl"),
		"/usr/share/spdx":                  dir(0o755), "/.extra": dir(0o755), "/system": dir(0o755), "/mnt": dir(0o755),
		"/boot/EFI": dir(0o755), "/etc/kubernetes/manifests": dir(0o755), "/etc/cni/net.d": dir(0o755),
		"/opt/containerd/bin": dir(0o755), "/usr/local/lib/kubelet/credentialproviders": dir(0o755),
		"/etc/cri/conf.d/hosts": dir(0o755), "/usr/lib/firmware": dir(0o755),
	}

	for _, f := range talosFiles {
		want[f.to] = file("talos:"+f.from, 0o644)
	}

	check(t, root, want)

	// The spot checks the list above cannot make: where Talos reads its configuration.
	for p, from := range map[string]string{
		"/etc/containerd/config.toml":              "hack/containerd.toml",
		"/usr/share/zoneinfo/Etc/UTC":              "hack/zoneinfo/Etc/UTC",
		"/usr/lib/udev/rules.d/40-vm-hotadd.rules": "hack/udevd/40-vm-hotadd.rules",
		"/usr/lib/systemd/network/99-default.link": "hack/udevd/99-default.link",
		"/etc/cri/conf.d/00-base.part":             "hack/cri-plugin.part",
		"/etc/cri/containerd.toml":                 "hack/cri-containerd.toml",
		"/etc/lvm/lvm.conf":                        "hack/lvm.conf",
		"/etc/nfsmount.conf":                       "hack/nfsmount.conf",
		"/usr/lib/udev/rules.d/90-selinux.rules":   "hack/udevd/90-selinux.rules",
	} {
		b, err := os.ReadFile(root.host(p))
		require.NoError(t, err)
		assert.Equal(t, "talos:"+from, string(b), p)
	}

	// A file missing from the module is an error naming it.
	require.NoError(t, os.Remove(filepath.Join(talos, "hack", "lvm.conf")))

	err := talosLayout(tree{root: t.TempDir()}, Options{TalosSource: talos, MachinerySource: machinery})
	assert.ErrorContains(t, err, filepath.Join("hack", "lvm.conf"))
}

// keyInputs lays out every file Key reads, each with distinct content.
func keyInputs(t *testing.T) Options {
	t.Helper()

	dir := t.TempDir()
	talos, machinery := talosSource(t)
	opts := Options{
		TalosVersion: "v1.13.9",
		Bins:         filepath.Join(dir, "bins"),
		Preinit:      filepath.Join(dir, "preinit"),
		Debian:       filepath.Join(dir, "debian"),
		TalosSource:  talos, MachinerySource: machinery,
	}

	for _, p := range keyFiles(opts) {
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte("content of "+filepath.Base(p)), 0o755))
	}

	return opts
}

// keyFiles are the files that go into the key besides the imager itself.
func keyFiles(opts Options) []string {
	files := []string{opts.Preinit, filepath.Join(opts.Debian, "versions.txt")}
	for _, b := range []string{"machined", "init", "installer", "containerd", "containerd-shim-runc-v2"} {
		files = append(files, filepath.Join(opts.Bins, b))
	}

	return files
}

// TestKey: the key changes when any input changes, and only then.
func TestKey(t *testing.T) {
	t.Parallel()

	opts := keyInputs(t)

	base, err := Key(opts)
	require.NoError(t, err)
	assert.Regexp(t, `^[0-9a-f]{16}$`, base)

	again, err := Key(opts)
	require.NoError(t, err)
	assert.Equal(t, base, again, "the same inputs, the same key")

	// Untouched content, a new time and mode: the same key.
	for _, p := range keyFiles(opts) {
		require.NoError(t, os.Chtimes(p, time.Unix(1, 0), time.Unix(1, 0)))
		require.NoError(t, os.Chmod(p, 0o600))
	}

	again, err = Key(opts)
	require.NoError(t, err)
	assert.Equal(t, base, again, "times and modes are not inputs")

	seen := map[string]string{base: "base"}

	for _, p := range keyFiles(opts) {
		old, err := os.ReadFile(p)
		require.NoError(t, err)

		require.NoError(t, os.WriteFile(p, append(old, '!'), 0o600))

		changed, err := Key(opts)
		require.NoError(t, err)
		assert.NotContains(t, seen, changed, "a change of %s changes the key", filepath.Base(p))
		seen[changed] = p

		require.NoError(t, os.WriteFile(p, old, 0o600))

		restored, err := Key(opts)
		require.NoError(t, err)
		assert.Equal(t, base, restored, "%s restored", filepath.Base(p))
	}

	// The Talos version and the modules' versions (their directories' names).
	for name, o := range map[string]Options{
		"Talos version": withOpts(opts, func(o *Options) { o.TalosVersion = "v1.13.10" }),
		"Talos module":  withOpts(opts, func(o *Options) { o.TalosSource = filepath.Join(filepath.Dir(o.TalosSource), "talos@v1.13.10") }),
		"machinery module": withOpts(opts, func(o *Options) {
			o.MachinerySource = filepath.Join(filepath.Dir(o.MachinerySource), "machinery@v1.13.10")
		}),
	} {
		k, err := Key(o)
		require.NoError(t, err)
		assert.NotContains(t, seen, k, "a change of the %s changes the key", name)
		seen[k] = name
	}

	// Outputs and the kernel version are not inputs (the kernel's is in versions.txt).
	k, err := Key(withOpts(opts, func(o *Options) { o.Out, o.KernelVersion = t.TempDir(), "6.99" }))
	require.NoError(t, err)
	assert.Equal(t, base, k)

	require.NoError(t, os.Remove(filepath.Join(opts.Bins, "containerd")))

	_, err = Key(opts)
	assert.ErrorContains(t, err, filepath.Join(opts.Bins, "containerd"))
}

func withOpts(o Options, f func(*Options)) Options {
	f(&o)

	return o
}

// userland lays out a fake unpacked userland with every program Talos runs.
func userland(t *testing.T, program func(from string) []byte) tree {
	t.Helper()

	deb := tree{root: t.TempDir()}

	for _, p := range rootfsPrograms {
		h := deb.host(p.from)
		require.NoError(t, os.MkdirAll(filepath.Dir(h), 0o755))
		require.NoError(t, os.WriteFile(h, program(p.from), 0o755))
	}

	return deb
}

// TestDebianPrograms: the Debian programs land in /usr/bin under their Talos names, with
// what they load: nothing for static ones; for a dynamic one its libc and the loader,
// found where /lib64 leads in Talos' FHS.
func TestDebianPrograms(t *testing.T) {
	t.Parallel()

	prog := staticProgram(t)

	// Each program is the static one with its name after it (ELF readers ignore what
	// follows), so that a program landing under another's name shows.
	marked := func(from string) []byte { return append(bytes.Clone(prog), []byte("\x00"+from)...) }

	t.Run("static", func(t *testing.T) {
		t.Parallel()

		deb := userland(t, marked)
		root := tree{root: t.TempDir()}

		require.NoError(t, fhs(root))
		require.NoError(t, debianPrograms(root, deb))

		want := map[string]kind{"/usr/sbin": link("bin"), "/sbin": link("usr/bin")}
		for _, p := range rootfsPrograms {
			want["/usr/bin/"+p.to] = file(string(marked(p.from)), 0o755)
		}

		check(t, root, want)

		// Nothing else: a static program needs nothing.
		var files []string

		require.NoError(t, filepath.WalkDir(root.root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				files = append(files, strings.TrimPrefix(p, root.root))
			}

			return err
		}))
		assert.Len(t, files, len(rootfsPrograms), "%v", files)
	})

	t.Run("dynamic", func(t *testing.T) {
		t.Parallel()

		ldso, err := filepath.EvalSymlinks("/lib64/ld-linux-x86-64.so.2")
		if err != nil {
			t.Skipf("no host loader: %v", err)
		}

		libc, err := filepath.EvalSymlinks("/lib/x86_64-linux-gnu/libc.so.6")
		if err != nil {
			t.Skipf("no host libc: %v", err)
		}

		read := func(p string) []byte {
			b, err := os.ReadFile(p)
			require.NoError(t, err)

			return b
		}

		// kmod a dynamic program of the host (true, needing libc only), in a tree laid out
		// as trixie's libc6 unpacks.
		deb := userland(t, func(from string) []byte {
			if from == "/usr/bin/kmod" {
				return read("/usr/bin/true")
			}

			return marked(from)
		})

		lay(t, deb, map[string]kind{
			"/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2": file(string(read(ldso)), 0o755),
			"/usr/lib/x86_64-linux-gnu/libc.so.6":            file(string(read(libc)), 0o755),
			"/usr/lib64/ld-linux-x86-64.so.2":                link("../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"),
		})

		root := tree{root: t.TempDir()}

		require.NoError(t, fhs(root))
		require.NoError(t, debianPrograms(root, deb))

		check(t, root, map[string]kind{
			"/usr/bin/kmod":                       file(string(read("/usr/bin/true")), 0o755),
			"/usr/lib/x86_64-linux-gnu/libc.so.6": file(string(read(libc)), 0o755),
			"/usr/lib64":                          link("lib"),
			"/lib64":                              link("usr/lib"),
		})

		// The loader where the program asks for it, through Talos' links.
		loader, err := filepath.EvalSymlinks(root.host("/lib64/ld-linux-x86-64.so.2"))
		require.NoError(t, err)
		assert.Equal(t, root.host("/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"), loader)
		assert.Equal(t, read(ldso), read(loader))
	})

	t.Run("a program missing", func(t *testing.T) {
		t.Parallel()

		deb := userland(t, marked)
		require.NoError(t, os.Remove(deb.host("/usr/sbin/xfs_db")))

		err := debianPrograms(tree{root: t.TempDir()}, deb)
		assert.ErrorContains(t, err, "/usr/sbin/xfs_db")
	})

	t.Run("a library missing", func(t *testing.T) {
		t.Parallel()

		deb := userland(t, func(from string) []byte {
			if from == "/usr/bin/kmod" {
				b, err := os.ReadFile("/usr/bin/true")
				require.NoError(t, err)

				return b
			}

			return marked(from)
		})

		err := debianPrograms(tree{root: t.TempDir()}, deb)
		assert.ErrorContains(t, err, "/usr/bin/kmod")
	})
}

// needSquashfs skips the test without Debian's squashfs-tools.
func needSquashfs(t *testing.T) {
	t.Helper()

	for _, p := range []string{"mksquashfs", "unsquashfs"} {
		if _, err := exec.LookPath(p); err != nil {
			t.Skipf("%s is missing (make setup installs squashfs-tools): %v", p, err)
		}
	}
}

// TestSquashfs: the rootfs packed and unpacked again is the tree, every file root's and
// of the given time, and the same tree gives the same bytes.
func TestSquashfs(t *testing.T) {
	t.Parallel()
	needSquashfs(t)

	src := tree{root: t.TempDir()}
	paths := map[string]kind{
		"/usr/bin/init":                 file("\x7fELF machined", 0o755),
		"/usr/bin/poweroff":             link("init"),
		"/etc/hosts":                    file("", 0o644),
		"/etc/os-release":               file("NAME=Talos\n", 0o644),
		"/etc/localtime":                link("/usr/share/zoneinfo/Etc/UTC"),
		"/usr/lib/udev/rules.d/x.rules": file("KERNEL==\"x\"\n", 0o600),
		"/tmp":                          dir(0o777 | fs.ModeSticky),
		"/root":                         dir(0o750),
		"/usr/share/spdx":               dir(0o755),
		"/usr/lib/modules/6.6/big.ko":   file(strings.Repeat("module ", 100_000), 0o644),
	}
	lay(t, src, paths)

	mtime := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	work := t.TempDir()
	out := filepath.Join(work, "rootfs.sqsh")

	require.NoError(t, squashfs(t.Context(), src.root, out, mtime))

	// A second time, over the first: the same bytes (-noappend).
	first, err := os.ReadFile(out)
	require.NoError(t, err)
	require.NoError(t, squashfs(t.Context(), src.root, out, mtime))

	second, err := os.ReadFile(out)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(first, second), "two packs of one tree differ")

	// zstd, as Talos packs its rootfs.
	stat, err := exec.CommandContext(t.Context(), "unsquashfs", "-s", out).CombinedOutput()
	require.NoError(t, err, "%s", stat)
	assert.Contains(t, string(stat), "Compression zstd")

	// Every entry root's, of mtime.
	list, err := exec.CommandContext(t.Context(), "unsquashfs", "-lln", "-d", "", out).CombinedOutput()
	require.NoError(t, err, "%s", list)

	for line := range strings.Lines(string(list)) {
		f := strings.Fields(line)
		if len(f) < 6 || !strings.HasPrefix(f[len(f)-1], "/") && !strings.Contains(line, " -> ") {
			continue
		}

		assert.Equal(t, "0/0", f[1], "owner of %s", line)
		assert.Contains(t, line, mtime.Local().Format("2006-01-02 15:04"), "time of %s", line) // unsquashfs prints local times
	}

	dst := filepath.Join(work, "x")
	b, err := exec.CommandContext(t.Context(), "unsquashfs", "-no-progress", "-d", dst, out).CombinedOutput()
	require.NoError(t, err, "%s", b)

	check(t, tree{root: dst}, paths)

	st, err := os.Lstat(filepath.Join(dst, "usr", "bin", "init"))
	require.NoError(t, err)
	assert.True(t, st.ModTime().Equal(mtime), "mtime %s", st.ModTime())

	// Not a directory: an error saying what mksquashfs said.
	err = squashfs(t.Context(), filepath.Join(work, "missing"), filepath.Join(work, "y.sqsh"), mtime)
	assert.ErrorContains(t, err, "mksquashfs")
}

// TestSquashfsMissing: without mksquashfs the error says what installs it.
func TestSquashfsMissing(t *testing.T) { // not parallel: it sets PATH
	t.Setenv("PATH", t.TempDir())

	err := squashfs(t.Context(), t.TempDir(), filepath.Join(t.TempDir(), "x.sqsh"), time.Unix(0, 0))
	assert.ErrorContains(t, err, "make setup installs squashfs-tools")
}
