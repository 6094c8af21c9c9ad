package talosbuild

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/imager/internal/kmod/kmodtest"
)

// buildInputs lays out everything Build reads, fake: Talos' binaries, the preinit,
// Debian's kernel, userland and installer trees (programs tiny ELF objects without
// interpreter or libraries: static to elfdeps, and quick to pack), versions.txt, and the
// Talos and machinery modules' files.
func buildInputs(t *testing.T) Options {
	t.Helper()

	prog := tinyELF("program")
	dir := t.TempDir()
	talos, machinery := talosSource(t)
	opts := Options{
		TalosVersion: "v1.13.9",
		Bins:         filepath.Join(dir, "bins"), Preinit: filepath.Join(dir, "preinit"), Debian: filepath.Join(dir, "debian"),
		TalosSource: talos, MachinerySource: machinery,
		MTime: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
	}

	for _, b := range []string{"machined", "init", "installer", "containerd", "containerd-shim-runc-v2"} {
		p := filepath.Join(opts.Bins, b)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte("\x7fELF "+b), 0o755))
	}

	require.NoError(t, os.WriteFile(opts.Preinit, []byte("\x7fELF preinit"), 0o755))
	require.NoError(t, os.MkdirAll(opts.Debian, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(opts.Debian, "versions.txt"),
		[]byte("kernel "+testKernel+"\nudev 257.9-1~deb13u1\n\nrunc 1.1.15+ds1-2+b4\n"), 0o644))

	// The kernel: the preinit's modules, and some the rootfs drops.
	fakeKernel(t, opts.Debian)

	kernel := tree{root: filepath.Join(opts.Debian, "kernel", "root")}
	modules := "/usr/lib/modules/" + testKernel
	lay(t, kernel, map[string]kind{
		modules + "/vmlinuz":                           file("MZ kernel", 0o644),
		modules + "/System.map":                        file("map", 0o644),
		modules + "/kernel/sound/core/snd.ko":          file("\x7fELF snd", 0o644),
		modules + "/kernel/drivers/block/floppy.ko.xz": file("floppy", 0o644),
	})

	// The userland: Talos' programs, udev's rules, hardware database and a helper.
	for _, p := range rootfsPrograms {
		h := filepath.Join(opts.Debian, "userland", "root", filepath.FromSlash(p.from))
		require.NoError(t, os.MkdirAll(filepath.Dir(h), 0o755))
		require.NoError(t, os.WriteFile(h, prog, 0o755))
	}

	userland := tree{root: filepath.Join(opts.Debian, "userland", "root")}
	lay(t, userland, map[string]kind{
		"/usr/lib/udev/rules.d/60-block.rules": file("KERNEL==\"sd*\"\n", 0o644),
		"/usr/lib/udev/hwdb.d/20-pci.hwdb":     file("pci:v*\n", 0o644),
		"/usr/lib/udev/ata_id":                 file(string(prog), 0o755),
		"/usr/lib/udev/not-a-helper.txt":       file("text", 0o644),
		xfsConfigDebian:                        file("[metadata]\ncrc=1\n", 0o644),
	})

	installerTree(t, opts.Debian, prog)

	return opts
}

// TestBuild: make talos' assets from fake inputs: every output, the manifest naming them
// by digest, the rootfs inside the initramfs laid out as Talos' (its programs, Talos'
// files, the kernel's modules less what a server never loads, indexed), and the same
// bytes from the same inputs.
func TestBuild(t *testing.T) {
	t.Parallel()
	needSquashfs(t)

	if _, err := exec.LookPath("depmod"); err != nil {
		t.Skipf("depmod is missing (Debian's kmod): %v", err)
	}

	opts := buildInputs(t)
	opts.Out = filepath.Join(t.TempDir(), "assets")
	opts.Log = testLog{t}

	m, err := Build(t.Context(), opts)
	require.NoError(t, err)

	assert.Equal(t, "v1.13.9", m.TalosVersion)
	assert.Equal(t, testKernel, m.KernelVersion)
	assert.Equal(t, []string{"udev 257.9-1~deb13u1", "runc 1.1.15+ds1-2+b4"}, m.Packages)

	names := []string{KernelFile, InitramfsFile, InstallerBaseFile, UKIStubFile, OSReleaseFile}
	assert.ElementsMatch(t, names, slices.Collect(maps.Keys(m.Files)))

	for _, f := range names {
		b, err := os.ReadFile(filepath.Join(opts.Out, f))
		require.NoError(t, err)

		sum := sha256.Sum256(b)
		assert.Equal(t, hex.EncodeToString(sum[:]), m.Files[f], f)
	}

	// talos.json is the manifest returned.
	b, err := os.ReadFile(filepath.Join(opts.Out, ManifestFile))
	require.NoError(t, err)

	var written Manifest

	require.NoError(t, json.Unmarshal(b, &written))
	assert.Equal(t, *m, written)

	for f, want := range map[string]string{
		KernelFile: "MZ kernel", UKIStubFile: "MZ stub", OSReleaseFile: "NAME=\"Talos\"\nVERSION_ID=v1.13.9\n",
	} {
		b, err := os.ReadFile(filepath.Join(opts.Out, f))
		require.NoError(t, err)
		assert.Equal(t, want, string(b), f)
	}

	// The rootfs, out of the initramfs.
	initramfsData, err := os.ReadFile(filepath.Join(opts.Out, InitramfsFile))
	require.NoError(t, err)

	var sqsh []byte

	for _, r := range readArchive(t, initramfsData) {
		if r.Name == "rootfs.sqsh" {
			sqsh = []byte(recordContent(t, r))
		}
	}

	require.NotEmpty(t, sqsh, "rootfs.sqsh in the initramfs")

	work := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(work, "rootfs.sqsh"), sqsh, 0o644))

	out, err := exec.CommandContext(t.Context(), "unsquashfs", "-no-progress", "-d", filepath.Join(work, "rootfs"), filepath.Join(work, "rootfs.sqsh")).CombinedOutput()
	require.NoError(t, err, "%s", out)

	rootfs := tree{root: filepath.Join(work, "rootfs")}
	modules := "/usr/lib/modules/" + testKernel
	want := map[string]kind{
		"/usr/bin/init":                          file("\x7fELF machined", 0o755),
		"/usr/bin/containerd":                    file("\x7fELF containerd", 0o755),
		"/usr/bin/containerd-shim-runc-v2":       file("\x7fELF containerd-shim-runc-v2", 0o755),
		"/usr/bin/apid":                          link("init"),
		"/usr/bin/poweroff":                      link("init"),
		"/usr/bin/modprobe":                      link("kmod"),
		"/usr/bin/mkfs.vfat":                     link("mkfs.fat"),
		"/usr/lib/udev/rules.d/60-block.rules":   file("KERNEL==\"sd*\"\n", 0o644),
		"/usr/lib/udev/hwdb.d/20-pci.hwdb":       file("pci:v*\n", 0o644),
		"/usr/lib/udev/ata_id":                   file(string(tinyELF("program")), 0o755),
		"/usr/share/xfsprogs/mkfs/lts_6.18.conf": file("[metadata]\ncrc=1\n", 0o644),
		"/etc/os-release":                        file("NAME=\"Talos\"\nVERSION_ID=v1.13.9\n", 0o644),
		"/etc/containerd/config.toml":            file("talos:hack/containerd.toml", 0o644),
		"/etc/localtime":                         link("/usr/share/zoneinfo/Etc/UTC"),
		"/tmp":                                   dir(0o777 | os.ModeSticky),
		"/lib64":                                 link("usr/lib"),
		modules + "/kernel/fake/virtio_net.ko":   file(string(mustRead(t, filepath.Join(opts.Debian, "kernel", "root", modules, "kernel/fake/virtio_net.ko"))), 0o644),
	}

	for _, p := range rootfsPrograms {
		want["/usr/bin/"+p.to] = file(string(tinyELF("program")), 0o755)
	}

	check(t, rootfs, want)

	for _, p := range []string{
		modules + "/vmlinuz", modules + "/System.map", modules + "/kernel/sound", modules + "/kernel/drivers/block/floppy.ko.xz",
		modules + "/kernel/drivers/gpu", "/usr/lib/udev/not-a-helper.txt",
	} {
		_, err := os.Lstat(rootfs.host(p))
		assert.ErrorIs(t, err, os.ErrNotExist, "%s dropped", p)
	}

	// depmod indexed what is left.
	dep, err := os.ReadFile(rootfs.host(modules + "/modules.dep"))
	require.NoError(t, err)
	assert.Contains(t, string(dep), "kernel/fake/virtio_net.ko:")
	assert.NotContains(t, string(dep), "sound")

	// The same inputs, the same bytes.
	again := opts
	again.Out = filepath.Join(t.TempDir(), "assets")

	m2, err := Build(t.Context(), again)
	require.NoError(t, err)
	assert.Equal(t, m, m2)

	for _, f := range append(names, ManifestFile) {
		assert.True(t, bytes.Equal(mustRead(t, filepath.Join(opts.Out, f)), mustRead(t, filepath.Join(again.Out, f))), "%s differs", f)
	}

	// No kernel in versions.txt.
	require.NoError(t, os.WriteFile(filepath.Join(opts.Debian, "versions.txt"), []byte("udev 257\n"), 0o644))

	_, err = Build(t.Context(), opts)
	assert.ErrorContains(t, err, "no kernel")
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()

	b, err := os.ReadFile(p)
	require.NoError(t, err)

	return b
}

// testLog is the build's progress in the test's log.
type testLog struct{ t *testing.T }

func (l testLog) Write(b []byte) (int, error) {
	l.t.Log(strings.TrimSpace(string(b)))

	return len(b), nil
}

// tinyELF is an ELF object of a few hundred bytes that needs nothing.
func tinyELF(name string) []byte { return kmodtest.KO("name=" + name) }
