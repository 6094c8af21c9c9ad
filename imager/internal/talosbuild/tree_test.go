package talosbuild

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// kind is what a path in a test tree is: a file with content and mode, a directory with
// mode, or a link with target.
type kind struct {
	data   string
	mode   fs.FileMode
	dir    bool
	target string
}

func file(data string, mode fs.FileMode) kind { return kind{data: data, mode: mode} }
func dir(mode fs.FileMode) kind               { return kind{dir: true, mode: mode} }
func link(target string) kind                 { return kind{target: target} }

// lay makes the paths in t, parents first. Modes are Go's (fs.ModeSticky, not 0o1000).
func lay(tb testing.TB, t tree, paths map[string]kind) {
	tb.Helper()

	for _, p := range sortedKeys(paths) {
		k := paths[p]

		// Made with os's calls, not the tree's: they are under test.
		h := t.host(p)
		require.NoError(tb, os.MkdirAll(filepath.Dir(h), 0o755))

		switch {
		case k.target != "":
			require.NoError(tb, os.Symlink(k.target, h))

			continue
		case k.dir:
			require.NoError(tb, os.Mkdir(h, 0o700))
		default:
			require.NoError(tb, os.WriteFile(h, []byte(k.data), 0o600))
		}

		require.NoError(tb, os.Chmod(h, k.mode))
	}
}

// check asserts each path in t is what want says: its type, mode, content or target.
func check(tb testing.TB, t tree, want map[string]kind) {
	tb.Helper()

	for p, k := range want {
		st, err := os.Lstat(t.host(p))
		if !assert.NoError(tb, err, p) {
			continue
		}

		switch {
		case k.target != "":
			if assert.Equal(tb, fs.ModeSymlink, st.Mode().Type(), "%s is a link", p) {
				target, err := os.Readlink(t.host(p))
				require.NoError(tb, err)
				assert.Equal(tb, k.target, target, "%s's target", p)
			}
		case k.dir:
			assert.True(tb, st.IsDir(), "%s is a directory", p)
			assert.Equal(tb, k.mode, st.Mode()&modeBits, "%s's mode", p)
		default:
			if assert.True(tb, st.Mode().IsRegular(), "%s is a file (%s)", p, st.Mode()) {
				b, err := os.ReadFile(t.host(p))
				require.NoError(tb, err)
				assert.Equal(tb, k.data, string(b), "%s's content", p)
				assert.Equal(tb, k.mode, st.Mode()&modeBits, "%s's mode", p)
			}
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}

	slices.Sort(keys)

	return keys
}

func TestTreeCopyFrom(t *testing.T) {
	t.Parallel()

	src := tree{root: t.TempDir()}
	lay(t, src, map[string]kind{
		"/usr/lib/udev":                        dir(0o755),
		"/usr/lib/udev/rules.d":                dir(0o750),
		"/usr/lib/udev/rules.d/60-block.rules": file("KERNEL==\"sd*\"\n", 0o644),
		"/usr/lib/udev/rules.d/secret.rules":   file("x", 0o600),
		"/usr/lib/udev/ata_id":                 file("\x7fELF ata_id", 0o755),
		"/usr/lib/udev/setuid-helper":          file("\x7fELF helper", 0o755|fs.ModeSetuid),
		"/usr/lib/udev/rules.d/99-link.rules":  link("60-block.rules"),
		"/usr/lib/udev/abs-link":               link("/usr/bin/udevadm"),
		"/usr/lib/udev/dangling":               link("nowhere"),
		"/usr/lib/udev/empty":                  dir(0o700),
		"/usr/lib/udev/sticky":                 dir(0o777 | fs.ModeSticky),
		"/usr/lib/other":                       file("not copied", 0o644),
	})

	for _, tc := range []struct {
		name string
		path string
		want map[string]kind
		gone []string
	}{
		{
			name: "a directory, recursively, as it is",
			path: "/usr/lib/udev",
			want: map[string]kind{
				"/usr/lib/udev":                        dir(0o755),
				"/usr/lib/udev/rules.d":                dir(0o750),
				"/usr/lib/udev/rules.d/60-block.rules": file("KERNEL==\"sd*\"\n", 0o644),
				"/usr/lib/udev/rules.d/secret.rules":   file("x", 0o600),
				"/usr/lib/udev/ata_id":                 file("\x7fELF ata_id", 0o755),
				"/usr/lib/udev/setuid-helper":          file("\x7fELF helper", 0o755|fs.ModeSetuid),
				"/usr/lib/udev/rules.d/99-link.rules":  link("60-block.rules"),
				"/usr/lib/udev/abs-link":               link("/usr/bin/udevadm"),
				"/usr/lib/udev/dangling":               link("nowhere"),
				"/usr/lib/udev/empty":                  dir(0o700),
				"/usr/lib/udev/sticky":                 dir(0o777 | fs.ModeSticky),
			},
			gone: []string{"/usr/lib/other"},
		},
		{
			name: "a file",
			path: "/usr/lib/udev/rules.d/secret.rules",
			want: map[string]kind{"/usr/lib/udev/rules.d/secret.rules": file("x", 0o600)},
			gone: []string{"/usr/lib/udev/rules.d/60-block.rules", "/usr/lib/udev/ata_id"},
		},
		{
			name: "a link stays a link",
			path: "/usr/lib/udev/rules.d/99-link.rules",
			want: map[string]kind{"/usr/lib/udev/rules.d/99-link.rules": link("60-block.rules")},
			gone: []string{"/usr/lib/udev/rules.d/60-block.rules"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			dst := tree{root: t.TempDir()}
			require.NoError(t, dst.copyFrom(src, tc.path))
			check(t, dst, tc.want)

			for _, p := range tc.gone {
				_, err := os.Lstat(dst.host(p))
				assert.ErrorIs(t, err, fs.ErrNotExist, p)
			}
		})
	}

	err := tree{root: t.TempDir()}.copyFrom(src, "/usr/lib/missing")
	assert.ErrorContains(t, err, "/usr/lib/missing")
}

// TestTreeThroughLinks: a path written through a linked directory (/usr/sbin → bin, as
// Talos' FHS has it) lands where the link leads, the link staying a link; a link
// replaces what was at its path.
func TestTreeThroughLinks(t *testing.T) {
	t.Parallel()

	src := filepath.Join(t.TempDir(), "prog")
	require.NoError(t, os.WriteFile(src, []byte("\x7fELF prog"), 0o600))

	deb := tree{root: t.TempDir()}
	lay(t, deb, map[string]kind{
		"/usr/sbin/mkfs.fat":                  file("mkfs.fat", 0o755),
		"/usr/sbin/mkfs.vfat":                 link("mkfs.fat"),
		"/usr/lib/x86_64-linux-gnu/libc.so.6": file("libc", 0o644),
	})

	for _, tc := range []struct {
		name string
		do   func(tree) error
		want map[string]kind
	}{
		{
			name: "copyFile through /usr/sbin",
			do:   func(t tree) error { return t.copyFile(src, "/usr/sbin/runc", 0o755) },
			want: map[string]kind{"/usr/bin/runc": file("\x7fELF prog", 0o755), "/usr/sbin": link("bin")},
		},
		{
			name: "copyFile through /sbin and /bin to /usr/bin",
			do:   func(t tree) error { return t.copyFile(src, "/sbin/xfs_repair", 0o700) },
			want: map[string]kind{"/usr/bin/xfs_repair": file("\x7fELF prog", 0o700), "/sbin": link("usr/bin")},
		},
		{
			name: "copyFrom through /usr/sbin",
			do: func(t tree) error {
				if err := t.copyFrom(deb, "/usr/sbin/mkfs.fat"); err != nil {
					return err
				}

				return t.copyFrom(deb, "/usr/sbin/mkfs.vfat")
			},
			want: map[string]kind{"/usr/bin/mkfs.fat": file("mkfs.fat", 0o755), "/usr/bin/mkfs.vfat": link("mkfs.fat"), "/usr/sbin": link("bin")},
		},
		{
			name: "copyFrom of a directory through /lib64 → usr/lib",
			do: func(t tree) error {
				return t.copyTo(deb, "/usr/lib/x86_64-linux-gnu", "/lib64/x86_64-linux-gnu")
			},
			want: map[string]kind{"/usr/lib/x86_64-linux-gnu/libc.so.6": file("libc", 0o644), "/lib64": link("usr/lib")},
		},
		{
			name: "copyFile replaces a file, and a link (not writing through it)",
			do: func(t tree) error {
				if err := t.write("/usr/bin/a", 0o644, []byte("old")); err != nil {
					return err
				}

				if err := t.symlink("/etc/target", "/usr/bin/b"); err != nil {
					return err
				}

				if err := t.write("/etc/target", 0o644, []byte("target")); err != nil {
					return err
				}

				if err := t.copyFile(src, "/usr/bin/a", 0o755); err != nil {
					return err
				}

				return t.copyFile(src, "/usr/bin/b", 0o755)
			},
			want: map[string]kind{
				"/usr/bin/a": file("\x7fELF prog", 0o755), "/usr/bin/b": file("\x7fELF prog", 0o755),
				"/etc/target": file("target", 0o644),
			},
		},
		{
			name: "symlink replaces a file and a link",
			do: func(t tree) error {
				if err := t.write("/usr/bin/poweroff", 0o755, []byte("a file")); err != nil {
					return err
				}

				if err := t.symlink("init", "/usr/bin/poweroff"); err != nil {
					return err
				}

				if err := t.symlink("machined", "/usr/bin/reboot"); err != nil {
					return err
				}

				return t.symlink("init", "/usr/bin/reboot")
			},
			want: map[string]kind{"/usr/bin/poweroff": link("init"), "/usr/bin/reboot": link("init")},
		},
		{
			name: "touch makes empty files, write sets the mode whatever the umask",
			do: func(t tree) error {
				if err := t.touch("/etc/hosts", "/etc/cri/conf.d/cri.toml"); err != nil {
					return err
				}

				return t.write("/etc/shadow", 0o640, []byte("root:*"))
			},
			want: map[string]kind{
				"/etc/hosts": file("", 0o644), "/etc/cri/conf.d/cri.toml": file("", 0o644), "/etc/shadow": file("root:*", 0o640),
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			dst := tree{root: t.TempDir()}
			require.NoError(t, fhs(dst))
			require.NoError(t, tc.do(dst))
			check(t, dst, tc.want)
		})
	}
}

// TestFHS: the links siderolabs/pkgs' fhs makes, and its directories' modes.
func TestFHS(t *testing.T) {
	t.Parallel()

	root := tree{root: t.TempDir()}
	require.NoError(t, fhs(root))

	check(t, root, map[string]kind{
		"/bin": link("usr/bin"), "/sbin": link("usr/bin"), "/lib": link("usr/lib"), "/lib64": link("usr/lib"),
		"/usr/lib64": link("lib"), "/usr/sbin": link("bin"),
		"/var/run": link("../run"), "/var/lock": link("../run/lock"),
		"/tmp": dir(0o777 | fs.ModeSticky), "/var/tmp": dir(0o777 | fs.ModeSticky), "/root": dir(0o750),
		"/dev": dir(0o755), "/proc": dir(0o755), "/sys": dir(0o755), "/etc": dir(0o755), "/run/lock": dir(0o755),
		"/usr/bin": dir(0o755), "/usr/lib": dir(0o755), "/var/log": dir(0o755),
	})

	// The links resolve inside the tree.
	for p, want := range map[string]string{
		"/lib64": "/usr/lib", "/usr/lib64": "/usr/lib", "/sbin": "/usr/bin", "/usr/sbin": "/usr/bin", "/var/lock": "/run/lock",
	} {
		got, err := filepath.EvalSymlinks(root.host(p))
		require.NoError(t, err)
		assert.Equal(t, root.host(want), got, p)
	}

	// Twice is the same: make talos lays the FHS into trees that may have it.
	require.NoError(t, fhs(root))
}
