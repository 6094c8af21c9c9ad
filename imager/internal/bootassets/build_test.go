package bootassets_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/u-root/u-root/pkg/cpio"

	"github.com/anvil-metal/anvil/imager/internal/bootassets"
	"github.com/anvil-metal/anvil/imager/internal/kmod"
	"github.com/anvil-metal/anvil/imager/internal/kmod/kmodtest"
	"github.com/anvil-metal/anvil/internal/initramfs"
	"github.com/anvil-metal/anvil/internal/initramfs/initramfstest"
	"github.com/anvil-metal/anvil/internal/modules"
)

func TestBuild(t *testing.T) {
	root := t.TempDir()
	tree := kmodtest.Write(t, root)
	agent := fakeAgent(t)

	kernel := filepath.Join(root, "vmlinuz")
	require.NoError(t, os.WriteFile(kernel, []byte("not really a kernel"), 0o600))

	for _, c := range []initramfs.Compression{initramfs.XZ, initramfs.Zstd} {
		t.Run(string(c), func(t *testing.T) {
			opts := bootassets.Options{
				Agent:       agent,
				Kernel:      bootassets.Kernel{Image: kernel, ModulesDir: tree.ModulesDir, Version: kmodtest.Version},
				FirmwareDir: tree.FirmwareDir,
				Modules:     []string{"net_a", "nothere"},
				OutDir:      filepath.Join(t.TempDir(), "a"),
				Arch:        "amd64",
				Compression: c,
				ZstdLevel:   3,
				Cmdline:     bootassets.DefaultCmdline,
			}

			var log bytes.Buffer
			opts.Log = &log

			res, err := bootassets.Build(context.Background(), opts)
			require.NoError(t, err)
			assert.Equal(t, 4, res.Modules)
			assert.Equal(t, 2, res.Firmware)
			assert.Equal(t, []string{"missing.bin"}, res.MissingFirmware)
			assert.Contains(t, log.String(), "missing.bin (lib_c)")
			assert.Contains(t, log.String(), "no module matches: nothere")
			assert.Equal(t, filepath.Join(opts.OutDir, "initramfs-amd64."+c.Ext()), res.Initramfs)

			cmdline, err := os.ReadFile(res.Cmdline)
			require.NoError(t, err)
			assert.Equal(t, bootassets.DefaultCmdline+"\n", string(cmdline))

			files := readInitramfs(t, res.Initramfs, c)

			agentBytes, err := os.ReadFile(agent)
			require.NoError(t, err)
			assert.Equal(t, agentBytes, files["init"].data, "/init is not the agent")
			assert.EqualValues(t, cpio.S_IFREG|0o755, files["init"].Mode)
			assert.EqualValues(t, cpio.S_IFCHR|0o600, files["dev/console"].Mode)
			assert.EqualValues(t, cpio.S_IFCHR|0o666, files["dev/null"].Mode)

			for _, d := range []string{"dev", "proc", "sys", "run", "tmp", "etc", "lib/firmware", "lib/modules/" + kmodtest.Version} {
				assert.EqualValues(t, cpio.S_IFDIR, files[d].Mode&cpio.S_IFMT, d)
			}

			mods := "lib/modules/" + kmodtest.Version + "/"
			for _, name := range []string{
				"kernel/drivers/net/net-a.ko", "kernel/lib/lib_b.ko", "kernel/lib/lib_c.ko", "kernel/crypto/soft_e.ko",
				"modules.dep", "modules.alias", "modules.builtin", "modules.softdep", "modules.order", "modules.builtin.modinfo",
			} {
				assert.Contains(t, files, mods+name)
			}

			for name := range files {
				assert.NotContains(t, name, "unused")
				assert.NotContains(t, name, "lib_d")
				assert.NotContains(t, name, ".bin.xz")
				assert.NotContains(t, name, "modules.dep.bin")
			}

			// The decompressed module is the ELF the kernel loads.
			_, err = kmod.Modinfo(files[mods+"kernel/lib/lib_c.ko"].data)
			assert.NoError(t, err)

			// Every module modules.dep names is in the archive.
			for _, line := range strings.Split(strings.TrimSpace(string(files[mods+"modules.dep"].data)), "\n") {
				for _, p := range strings.Fields(strings.Replace(line, ":", " ", 1)) {
					assert.Contains(t, files, mods+p)
				}
			}

			assert.Equal(t, "firmware a", string(files["lib/firmware/vendor/a.bin"].data))
			assert.Equal(t, "firmware b, shipped decompressed", string(files["lib/firmware/vendor/b.bin"].data))

			// Same inputs, fresh directory: byte-identical bundle.
			again := opts
			again.OutDir = filepath.Join(t.TempDir(), "b")
			again.Log = nil

			res2, err := bootassets.Build(context.Background(), again)
			require.NoError(t, err)
			assert.False(t, res2.Cached)

			for _, pair := range [][2]string{{res.Initramfs, res2.Initramfs}, {res.Kernel, res2.Kernel}, {res.Cmdline, res2.Cmdline}} {
				a, err := os.ReadFile(pair[0])
				require.NoError(t, err)
				b, err := os.ReadFile(pair[1])
				require.NoError(t, err)
				assert.True(t, bytes.Equal(a, b), "%s and %s differ", pair[0], pair[1])
			}

			// Same directory again: the unchanged archive is not recompressed.
			res3, err := bootassets.Build(context.Background(), again)
			require.NoError(t, err)
			assert.True(t, res3.Cached)
		})
	}
}

func TestBuildSwitchCompression(t *testing.T) {
	root := t.TempDir()
	tree := kmodtest.Write(t, root)
	kernel := filepath.Join(root, "vmlinuz")
	require.NoError(t, os.WriteFile(kernel, []byte("kernel"), 0o600))

	opts := bootassets.Options{
		Agent:  kernel, // not ELF: shipped as is
		Kernel: bootassets.Kernel{Image: kernel, ModulesDir: tree.ModulesDir, Version: kmodtest.Version},
		OutDir: t.TempDir(), Arch: "amd64", Compression: initramfs.XZ, ZstdLevel: 1,
	}

	_, err := bootassets.Build(context.Background(), opts)
	require.NoError(t, err)

	opts.Compression = initramfs.Zstd
	res, err := bootassets.Build(context.Background(), opts)
	require.NoError(t, err)
	assert.False(t, res.Cached, "a stamp of another compression must not count")
	assert.NoFileExists(t, filepath.Join(opts.OutDir, "initramfs-amd64.xz"))
	assert.FileExists(t, filepath.Join(opts.OutDir, "initramfs-amd64.zst"))
}

func TestBuildRejectsDynamicAgent(t *testing.T) {
	tree := kmodtest.Write(t, t.TempDir())

	for _, tc := range []struct{ agent, err string }{
		{"/bin/sh", "dynamically linked"},
		{filepath.Join(t.TempDir(), "nope"), "agent binary"},
	} {
		if _, err := os.Stat("/bin/sh"); err != nil && tc.agent == "/bin/sh" {
			continue
		}

		_, err := bootassets.Build(context.Background(), bootassets.Options{
			Agent:  tc.agent,
			Kernel: bootassets.Kernel{Image: "/nonexistent", ModulesDir: tree.ModulesDir, Version: kmodtest.Version},
			OutDir: t.TempDir(), Arch: "amd64", Compression: initramfs.Zstd,
		})
		assert.ErrorContains(t, err, tc.err, tc.agent)
	}
}

// TestBuildRealKernel builds from the Debian kernel when it is installed (make setup
// installs linux-image-amd64), with zstd's fastest level to stay quick.
func TestBuildRealKernel(t *testing.T) {
	k, err := bootassets.FindKernel("/", "", "")
	if err != nil {
		t.Skipf("no kernel with modules installed (install linux-image-amd64, as make setup does): %v", err)
	}

	firmware := filepath.Join("..", "..", "..", "_out", "firmware")

	start := time.Now()
	res, err := bootassets.Build(context.Background(), bootassets.Options{
		Agent:       fakeAgent(t),
		Kernel:      k,
		FirmwareDir: firmware,
		Modules:     kmod.DefaultPatterns,
		OutDir:      t.TempDir(),
		Arch:        "amd64",
		Compression: initramfs.Zstd,
		ZstdLevel:   1,
		Cmdline:     bootassets.DefaultCmdline,
	})
	require.NoError(t, err)
	t.Logf("%s: %d modules, %d firmware (%d missing), %d → %d bytes in %s", k.Version, res.Modules, res.Firmware, len(res.MissingFirmware), res.ArchiveSize, res.InitramfsSize, time.Since(start))

	files := readInitramfs(t, res.Initramfs, initramfs.Zstd)
	mods := "lib/modules/" + k.Version + "/"

	shipped := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(files[mods+"modules.dep"].data)), "\n") {
		target, deps, _ := strings.Cut(line, ":")
		shipped[modules.Name(target)] = true

		for _, p := range append(strings.Fields(deps), target) {
			assert.Contains(t, files, mods+p, "modules.dep names a module not shipped")
		}
	}

	for _, want := range []string{"virtio_pci", "virtio_net", "virtio_blk", "e1000e", "nvme", "ahci", "ipmi_si", "ipmi_devintf", "tun", "wireguard", "sd_mod"} {
		assert.True(t, shipped[want], "%s is not in the initramfs", want)
	}

	// SideroLink's modules load from the initramfs: each with every module it needs, as
	// the kernel's own modules.dep names them (for WireGuard: its ciphers, curve25519 and
	// the UDP tunnels).
	source, err := modules.Open(k.ModulesDir)
	require.NoError(t, err)

	for _, name := range []string{"wireguard", "tun"} {
		m, ok := source.Module(name)
		if !ok {
			assert.True(t, source.Builtin(name), "%s is neither a module nor built in", name)

			continue
		}

		for _, dep := range m.Deps {
			assert.True(t, shipped[dep], "%s needs %s, which is not in the initramfs", name, dep)
		}
	}

	for _, line := range strings.Split(string(files[mods+"modules.alias"].data), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "alias" {
			assert.True(t, shipped[modules.Name(f[2])], "modules.alias names %s, not shipped", f[2])
		}
	}

	assert.Contains(t, files, mods+"modules.builtin")
}

func TestFindKernel(t *testing.T) {
	root := t.TempDir()

	for _, v := range []string{"6.1.0-9-amd64", "6.1.0-57-amd64", "6.1.0-60-amd64"} {
		require.NoError(t, os.MkdirAll(filepath.Join(root, "lib/modules", v), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(root, "lib/modules", v, "modules.dep"), nil, 0o644))
	}

	// 6.1.0-60 has modules but no kernel image: not a candidate.
	require.NoError(t, os.MkdirAll(filepath.Join(root, "boot"), 0o755))

	for _, v := range []string{"6.1.0-9-amd64", "6.1.0-57-amd64"} {
		require.NoError(t, os.WriteFile(filepath.Join(root, "boot", "vmlinuz-"+v), nil, 0o644))
	}

	for _, tc := range []struct {
		name, image, modules, want, err string
	}{
		{name: "newest installed", want: "6.1.0-57-amd64"},
		{name: "from image", image: filepath.Join(root, "boot/vmlinuz-6.1.0-9-amd64"), want: "6.1.0-9-amd64"},
		{name: "from modules", modules: filepath.Join(root, "lib/modules/6.1.0-9-amd64"), want: "6.1.0-9-amd64"},
		{name: "image without version", image: filepath.Join(root, "bzImage"), err: "--modules-dir"},
		{name: "modules without image", modules: filepath.Join(root, "lib/modules/6.1.0-60-amd64"), err: "vmlinuz-6.1.0-60-amd64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, err := bootassets.FindKernel(root, tc.image, tc.modules)
			if tc.err != "" {
				assert.ErrorContains(t, err, tc.err)

				return
			}

			require.NoError(t, err)
			assert.Equal(t, tc.want, k.Version)
			assert.Equal(t, filepath.Join(root, "boot", "vmlinuz-"+tc.want), k.Image)
			assert.Equal(t, filepath.Join(root, "lib/modules", tc.want), k.ModulesDir)
		})
	}

	_, err := bootassets.FindKernel(t.TempDir(), "", "")
	assert.ErrorContains(t, err, "linux-image-amd64")
}

type file struct {
	cpio.Info
	data []byte
}

func readInitramfs(t *testing.T, path string, c initramfs.Compression) map[string]file {
	t.Helper()

	data, err := os.ReadFile(path)
	require.NoError(t, err)

	recs := initramfstest.Records(t, data, c)

	files := map[string]file{}

	for _, r := range recs {
		data, err := io.ReadAll(io.NewSectionReader(r.ReaderAt, 0, int64(r.FileSize)))
		require.NoError(t, err)

		files[r.Name] = file{Info: r.Info, data: data}
	}

	return files
}

// fakeAgent builds a tiny static Go program, the stand-in for metal-agent.
func fakeAgent(t *testing.T) string {
	t.Helper()

	return fakeAgentFor(t, "amd64")
}

// fakeAgentFor builds the stand-in for goarch.
func fakeAgentFor(t *testing.T, goarch string) string {
	t.Helper()

	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module fakeagent\n\ngo 1.21\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\n\nfunc main() { println(\"agent\") }\n"), 0o644))

	out := filepath.Join(dir, "agent")
	cmd := exec.Command("go", "build", "-o", out, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=", "GOTOOLCHAIN=local", "GOARCH="+goarch)

	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the fake agent: %v\n%s", err, b)
	}

	return out
}
