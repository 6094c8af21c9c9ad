package talosbuild

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/u-root/u-root/pkg/cpio"
	"github.com/ulikunitz/xz"

	"github.com/anvil-metal/anvil/imager/internal/kmod/kmodtest"
	"github.com/anvil-metal/anvil/internal/initramfs"
	"github.com/anvil-metal/anvil/internal/initramfs/initramfstest"
)

const testKernel = "6.99.0-test-amd64"

// fakeModule is one module of the fake kernel: its path under the modules directory
// (.ko.xz: compressed, as Debian ships them) and the paths of what it needs.
type fakeModule struct {
	path string
	deps []string
}

// fakeKernel lays out a Debian kernel's modules directory under debian (kernel/root/usr/
// lib/modules/<version>) with a module for every preinit module, WireGuard needing the UDP
// tunnels (one of them compressed), and modules the preinit must leave out.
func fakeKernel(t *testing.T, debian string, leaveOut ...string) []fakeModule {
	t.Helper()

	dir := filepath.Join(debian, "kernel", "root", "usr", "lib", "modules", testKernel)

	mods := []fakeModule{
		{path: "kernel/net/ipv4/udp_tunnel.ko.xz"},
		{path: "kernel/net/ipv6/ip6_udp_tunnel.ko"},
		{path: "kernel/drivers/gpu/drm/unused.ko", deps: []string{"kernel/drivers/gpu/drm/unused_dep.ko"}},
		{path: "kernel/drivers/gpu/drm/unused_dep.ko"},
	}

	for _, name := range PreinitModules {
		if strings.Contains(strings.Join(leaveOut, " "), name) {
			continue
		}

		m := fakeModule{path: "kernel/fake/" + name + ".ko"}
		if name == "wireguard" {
			m.path = "kernel/drivers/net/wireguard/wireguard.ko.xz"
			m.deps = []string{"kernel/net/ipv4/udp_tunnel.ko.xz", "kernel/net/ipv6/ip6_udp_tunnel.ko"}
		}

		mods = append(mods, m)
	}

	var dep, alias strings.Builder

	for _, m := range mods {
		name := strings.ReplaceAll(strings.TrimSuffix(strings.TrimSuffix(filepath.Base(m.path), ".xz"), ".ko"), "-", "_")

		ko := kmodtest.KO("license=GPL", "name="+name)
		if strings.HasSuffix(m.path, ".xz") {
			ko = xzCompress(t, ko)
		}

		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, m.path)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, m.path), ko, 0o644))

		dep.WriteString(m.path + ":")

		for _, d := range m.deps {
			dep.WriteString(" " + d)
		}

		dep.WriteString("\n")
		alias.WriteString("alias fake:" + name + " " + name + "\n")
	}

	for name, content := range map[string]string{
		"modules.dep": dep.String(), "modules.alias": alias.String(),
		"modules.builtin": "kernel/drivers/block/built_in.ko\n", "modules.dep.bin": "not shipped",
	} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
	}

	return mods
}

func xzCompress(t *testing.T, b []byte) []byte {
	t.Helper()

	var buf bytes.Buffer

	w, err := xz.NewWriter(&buf)
	require.NoError(t, err)
	_, err = w.Write(b)
	require.NoError(t, err)
	require.NoError(t, w.Close())

	return buf.Bytes()
}

// initramfsInputs lays out what writeInitramfs reads: the preinit, Talos' init, the
// kernel's modules and a rootfs image.
func initramfsInputs(t *testing.T, leaveOut ...string) (Options, string) {
	t.Helper()

	dir := t.TempDir()
	opts := Options{
		Bins: filepath.Join(dir, "bins"), Preinit: filepath.Join(dir, "preinit"), Debian: filepath.Join(dir, "debian"),
		Out: filepath.Join(dir, "out"), KernelVersion: testKernel, MTime: time.Unix(1700000000, 0),
	}

	sqsh := filepath.Join(dir, "rootfs.sqsh")

	for p, content := range map[string]string{
		opts.Preinit: "\x7fELF preinit", filepath.Join(opts.Bins, "init"): "\x7fELF talos init", sqsh: "hsqs rootfs",
	} {
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	}

	require.NoError(t, os.MkdirAll(opts.Out, 0o755))
	fakeKernel(t, opts.Debian, leaveOut...)

	return opts, sqsh
}

// TestWriteInitramfs: Talos' initramfs holds the preinit as /init, Talos' init beside it,
// the rootfs image, the preinit's modules (with what they need, decompressed) and their
// index, and nothing else of the kernel's.
func TestWriteInitramfs(t *testing.T) {
	t.Parallel()

	opts, sqsh := initramfsInputs(t)
	require.NoError(t, writeInitramfs(t.Context(), opts, sqsh))

	data, err := os.ReadFile(filepath.Join(opts.Out, InitramfsFile))
	require.NoError(t, err)

	recs := readArchive(t, data)
	byName := map[string]cpio.Record{}

	for _, r := range recs {
		byName[r.Name] = r
		assert.EqualValues(t, 1700000000, r.MTime, r.Name)
		assert.Zero(t, r.UID, r.Name)
	}

	for name, want := range map[string]struct {
		mode    uint64
		content string
	}{
		"init":        {cpio.S_IFREG | 0o755, "\x7fELF preinit"},
		"init.talos":  {cpio.S_IFREG | 0o755, "\x7fELF talos init"},
		"rootfs.sqsh": {cpio.S_IFREG | 0o644, "hsqs rootfs"},
		"dev":         {cpio.S_IFDIR | 0o755, ""},
		"proc":        {cpio.S_IFDIR | 0o755, ""},
		"sys":         {cpio.S_IFDIR | 0o755, ""},
		"dev/console": {cpio.S_IFCHR | 0o600, ""},
	} {
		r, ok := byName[name]
		if !assert.True(t, ok, "%s in the archive", name) {
			continue
		}

		assert.Equal(t, want.mode, r.Mode, name)

		if want.content != "" {
			assert.Equal(t, want.content, recordContent(t, r), name)
		}
	}

	assert.EqualValues(t, 5, byName["dev/console"].Rmajor)
	assert.EqualValues(t, 1, byName["dev/console"].Rminor)

	base := "lib/modules/" + testKernel + "/"

	// Every preinit module, and WireGuard's dependencies, decompressed as .ko.
	wantModules := map[string]bool{
		base + "kernel/net/ipv4/udp_tunnel.ko":             true,
		base + "kernel/net/ipv6/ip6_udp_tunnel.ko":         true,
		base + "kernel/drivers/net/wireguard/wireguard.ko": true,
	}

	for _, m := range PreinitModules {
		if m != "wireguard" {
			wantModules[base+"kernel/fake/"+m+".ko"] = true
		}
	}

	var gotModules []string

	for _, r := range recs {
		if strings.HasSuffix(r.Name, ".ko") || strings.Contains(r.Name, ".ko.") {
			gotModules = append(gotModules, r.Name)
		}
	}

	assert.ElementsMatch(t, sortedKeys(wantModules), gotModules)

	wg := recordContent(t, byName[base+"kernel/drivers/net/wireguard/wireguard.ko"])
	assert.True(t, strings.HasPrefix(wg, "\x7fELF"), "wireguard.ko decompressed")
	assert.Contains(t, wg, "name=wireguard")

	// The index: the selection's, with the .ko names.
	depFile := recordContent(t, byName[base+"modules.dep"])
	assert.Contains(t, depFile, "kernel/drivers/net/wireguard/wireguard.ko: kernel/net/ipv4/udp_tunnel.ko kernel/net/ipv6/ip6_udp_tunnel.ko\n")
	assert.NotContains(t, depFile, "unused")
	assert.NotContains(t, depFile, ".xz")
	assert.Contains(t, recordContent(t, byName[base+"modules.alias"]), "alias fake:virtio_net virtio_net")
	assert.NotContains(t, recordContent(t, byName[base+"modules.alias"]), "unused")
	assert.Contains(t, byName, base+"modules.builtin")
	assert.NotContains(t, byName, base+"modules.dep.bin")

	// Nothing else: the modules' directories aside, the entries named above.
	top := []string{"init", "init.talos", "rootfs.sqsh", "dev", "dev/console", "proc", "sys", "lib", "lib/modules", strings.TrimSuffix(base, "/")}

	for _, r := range recs {
		if !strings.HasPrefix(r.Name, base) && !slices.Contains(top, r.Name) {
			t.Errorf("unexpected %s in the initramfs", r.Name)
		}
	}

	// The same inputs, the same bytes.
	require.NoError(t, writeInitramfs(t.Context(), opts, sqsh))

	again, err := os.ReadFile(filepath.Join(opts.Out, InitramfsFile))
	require.NoError(t, err)
	assert.True(t, bytes.Equal(data, again), "two builds differ")
}

// TestWriteInitramfsErrors: a kernel without one of the preinit's modules, or without its
// index, is an error naming what is missing.
func TestWriteInitramfsErrors(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, opts Options, sqsh string)
		leave []string
		err   string
	}{
		{name: "a module missing", leave: []string{"squashfs"}, err: "the kernel " + testKernel + " has no modules [squashfs]"},
		{name: "no index", setup: func(t *testing.T, opts Options, _ string) {
			t.Helper()
			require.NoError(t, os.Remove(filepath.Join(opts.Debian, "kernel", "root", "usr", "lib", "modules", testKernel, "modules.dep")))
		}, err: "modules.dep"},
		{name: "no preinit", setup: func(t *testing.T, opts Options, _ string) {
			t.Helper()
			require.NoError(t, os.Remove(opts.Preinit))
		}, err: "preinit"},
		{name: "no rootfs", setup: func(t *testing.T, _ Options, sqsh string) {
			t.Helper()
			require.NoError(t, os.Remove(sqsh))
		}, err: "rootfs.sqsh"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			opts, sqsh := initramfsInputs(t, tc.leave...)
			if tc.setup != nil {
				tc.setup(t, opts, sqsh)
			}

			assert.ErrorContains(t, writeInitramfs(t.Context(), opts, sqsh), tc.err)
		})
	}
}

// readArchive decompresses Talos' initramfs (zstd) and returns its records.
func readArchive(t *testing.T, data []byte) []cpio.Record {
	t.Helper()

	return initramfstest.Records(t, data, initramfs.Zstd)
}

func recordContent(t *testing.T, r cpio.Record) string {
	t.Helper()

	return string(initramfstest.Content(t, r))
}
