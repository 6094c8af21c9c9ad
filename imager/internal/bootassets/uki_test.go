package bootassets_test

import (
	"bytes"
	"context"
	"debug/pe"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/imager/internal/bootassets"
	"github.com/anvil-metal/anvil/imager/internal/kmod"
	"github.com/anvil-metal/anvil/imager/internal/kmod/kmodtest"
	"github.com/anvil-metal/anvil/internal/initramfs"
	"github.com/anvil-metal/anvil/internal/modules"
)

// fakeArm64Image is a stand-in arm64 kernel: an Image header with its magic at 0x38.
func fakeArm64Image() []byte {
	img := make([]byte, 0x400)
	copy(img, "MZ")
	copy(img[0x38:], "ARM\x64")

	return img
}

// fakeStub is a minimal PE32+ EFI application for machine: one .text section.
func fakeStub(machine uint16) []byte {
	le := binary.LittleEndian
	buf := make([]byte, 0x400)
	copy(buf, "MZ")
	le.PutUint32(buf[0x3c:], 0x40)
	copy(buf[0x40:], "PE\x00\x00")
	le.PutUint16(buf[0x44:], machine)
	le.PutUint16(buf[0x46:], 1)         // NumberOfSections
	le.PutUint16(buf[0x54:], 0x70+6*8)  // SizeOfOptionalHeader
	le.PutUint16(buf[0x58:], 0x20b)     // PE32+
	le.PutUint32(buf[0x58+32:], 0x1000) // SectionAlignment
	le.PutUint32(buf[0x58+36:], 0x200)  // FileAlignment
	le.PutUint32(buf[0x58+56:], 0x2000) // SizeOfImage
	le.PutUint32(buf[0x58+60:], 0x400)  // SizeOfHeaders
	le.PutUint16(buf[0x58+68:], 10)     // EFI application
	le.PutUint32(buf[0x58+108:], 6)     // NumberOfRvaAndSizes
	h := buf[0x58+0x70+6*8:]
	copy(h, ".text")
	le.PutUint32(h[8:], 0x200)
	le.PutUint32(h[12:], 0x1000)
	le.PutUint32(h[16:], 0x200)
	le.PutUint32(h[20:], 0x400)
	le.PutUint32(h[36:], 0x60000020)

	return append(buf, make([]byte, 0x200)...)
}

func TestBuildArm64UKI(t *testing.T) {
	root := t.TempDir()
	tree := kmodtest.Write(t, root)
	agent := fakeAgentFor(t, "arm64")
	amd64Agent := fakeAgent(t)

	arm64Kernel := filepath.Join(root, "Image")
	require.NoError(t, os.WriteFile(arm64Kernel, fakeArm64Image(), 0o600))

	amd64Kernel := filepath.Join(root, "bzImage")
	require.NoError(t, os.WriteFile(amd64Kernel, []byte("not an arm64 image"), 0o600))

	stubs := map[string]string{}
	for name, machine := range map[string]uint16{"aa64": pe.IMAGE_FILE_MACHINE_ARM64, "x64": pe.IMAGE_FILE_MACHINE_AMD64} {
		stubs[name] = filepath.Join(root, "linux"+name+".efi.stub")
		require.NoError(t, os.WriteFile(stubs[name], fakeStub(machine), 0o600))
	}

	stubs["text"] = filepath.Join(root, "notpe.stub")
	require.NoError(t, os.WriteFile(stubs["text"], []byte("not a PE file"), 0o600))

	for _, tc := range []struct {
		name, arch, kernel, stub, agent, err string
	}{
		{name: "amd64 agent for arm64", arch: "arm64", kernel: arm64Kernel, agent: amd64Agent, err: "is built for EM_X86_64, not arm64"},
		{name: "arm64 with UKI", arch: "arm64", kernel: arm64Kernel, stub: stubs["aa64"]},
		{name: "arm64 without UKI", arch: "arm64", kernel: arm64Kernel},
		{name: "amd64 kernel for arm64", arch: "arm64", kernel: amd64Kernel, err: "not an arm64 Image"},
		{name: "arm64 kernel for amd64", arch: "amd64", kernel: arm64Kernel, agent: amd64Agent, err: "is an arm64 Image, not a kernel for amd64"},
		{name: "amd64 stub for arm64", arch: "arm64", kernel: arm64Kernel, stub: stubs["x64"], err: "not arm64"},
		{name: "stub not PE", arch: "arm64", kernel: arm64Kernel, stub: stubs["text"], err: "not a PE image"},
		{name: "stub missing", arch: "arm64", kernel: arm64Kernel, stub: filepath.Join(root, "nope"), err: "error reading the UKI stub"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.agent == "" {
				tc.agent = agent
			}

			opts := bootassets.Options{
				Agent:       tc.agent,
				Kernel:      bootassets.Kernel{Image: tc.kernel, ModulesDir: tree.ModulesDir, Version: kmodtest.Version},
				FirmwareDir: tree.FirmwareDir,
				Modules:     []string{"net_a"},
				OutDir:      t.TempDir(),
				Arch:        tc.arch,
				UKIStub:     tc.stub,
				Compression: initramfs.Zstd,
				ZstdLevel:   1,
				Cmdline:     bootassets.Cmdline(tc.arch),
			}

			res, err := bootassets.Build(context.Background(), opts)
			if tc.err != "" {
				assert.ErrorContains(t, err, tc.err)
				assert.NoFileExists(t, filepath.Join(opts.OutDir, "agent-"+tc.arch+".efi"))

				return
			}

			require.NoError(t, err)
			assert.Equal(t, filepath.Join(opts.OutDir, "vmlinuz-arm64"), res.Kernel)
			assert.Equal(t, filepath.Join(opts.OutDir, "initramfs-arm64.zst"), res.Initramfs)

			cmdline, err := os.ReadFile(filepath.Join(opts.OutDir, "cmdline-arm64"))
			require.NoError(t, err)
			assert.Equal(t, bootassets.DefaultCmdlineArm64+"\n", string(cmdline))
			assert.Contains(t, string(cmdline), "console=ttyAMA0,115200n8")
			assert.NotContains(t, string(cmdline), "ttyS0")

			if tc.stub == "" {
				assert.Empty(t, res.UKI)
				assert.NoFileExists(t, filepath.Join(opts.OutDir, "agent-arm64.efi"))

				return
			}

			assert.Equal(t, filepath.Join(opts.OutDir, "agent-arm64.efi"), res.UKI)

			// The stub beside it, byte for byte, for the provider's per-machine UKIs.
			wantStub, err := os.ReadFile(opts.UKIStub)
			require.NoError(t, err)

			gotStub, err := os.ReadFile(filepath.Join(opts.OutDir, "uki-stub-arm64.efi"))
			require.NoError(t, err)
			assert.Equal(t, wantStub, gotStub)
			assert.Equal(t, filepath.Join(opts.OutDir, "uki-stub-arm64.efi"), res.UKIStub)

			f, err := pe.Open(res.UKI)
			require.NoError(t, err)

			defer f.Close()

			want := map[string][]byte{
				".osrel":   []byte(bootassets.OSRelease),
				".cmdline": []byte(bootassets.DefaultCmdlineArm64),
				".linux":   fakeArm64Image(),
			}
			want[".initrd"], err = os.ReadFile(res.Initramfs)
			require.NoError(t, err)

			require.Len(t, f.Sections, 5)

			for i, name := range []string{".text", ".osrel", ".cmdline", ".linux", ".initrd"} {
				s := f.Sections[i]
				assert.Equal(t, name, s.Name)

				if data, ok := want[name]; ok {
					raw, err := s.Data()
					require.NoError(t, err)
					assert.EqualValues(t, len(data), s.VirtualSize, name)
					assert.True(t, bytes.Equal(data, raw[:len(data)]), "%s differs", name)
				}
			}
		})
	}
}

func TestCheckKernelArch(t *testing.T) {
	dir := t.TempDir()
	arm64 := filepath.Join(dir, "Image")
	require.NoError(t, os.WriteFile(arm64, fakeArm64Image(), 0o600))

	short := filepath.Join(dir, "short")
	require.NoError(t, os.WriteFile(short, []byte("MZ"), 0o600))

	for _, tc := range []struct {
		image, arch, err string
	}{
		{arm64, "arm64", ""},
		{arm64, "amd64", "is an arm64 Image"},
		{short, "amd64", ""},
		{short, "arm64", "not an arm64 Image"},
		{filepath.Join(dir, "nope"), "amd64", "error reading the kernel"},
	} {
		err := bootassets.CheckKernelArch(tc.image, tc.arch)
		if tc.err == "" {
			assert.NoError(t, err, "%s %s", tc.image, tc.arch)
		} else {
			assert.ErrorContains(t, err, tc.err, "%s %s", tc.image, tc.arch)
		}
	}
}

// TestBuildRealArm64 builds the arm64 bundle from Debian's arm64 kernel and systemd-boot
// stub when hack/arm64-assets.sh has unpacked them (make agent-arm64 does), with zstd's
// fastest level to stay quick.
func TestBuildRealArm64(t *testing.T) {
	root := filepath.Join("..", "..", "..", "_out", "arm64", "root")
	stub := filepath.Join(root, "usr", "lib", "systemd", "boot", "efi", "linuxaa64.efi.stub")

	k, err := bootassets.FindKernel(root, "", "")
	if err != nil {
		t.Skipf("no arm64 kernel unpacked in %s (hack/arm64-assets.sh makes it): %v", root, err)
	}

	if _, err := os.Stat(stub); err != nil {
		t.Skipf("no arm64 systemd-boot stub (hack/arm64-assets.sh unpacks it): %v", err)
	}

	res, err := bootassets.Build(context.Background(), bootassets.Options{
		Agent:       fakeAgentFor(t, "arm64"),
		Kernel:      k,
		FirmwareDir: filepath.Join("..", "..", "..", "_out", "firmware"),
		Modules:     kmod.DefaultPatterns,
		OutDir:      t.TempDir(),
		Arch:        "arm64",
		UKIStub:     stub,
		Compression: initramfs.Zstd,
		ZstdLevel:   1,
		Cmdline:     bootassets.DefaultCmdlineArm64,
	})
	require.NoError(t, err)

	files := readInitramfs(t, res.Initramfs, initramfs.Zstd)
	mods := "lib/modules/" + k.Version + "/"
	shipped := map[string]bool{}

	for _, line := range strings.Split(strings.TrimSpace(string(files[mods+"modules.dep"].data)), "\n") {
		target, _, _ := strings.Cut(line, ":")
		shipped[modules.Name(target)] = true
	}

	for _, want := range []string{
		"virtio_pci", "virtio_pci_modern_dev", "virtio_pci_legacy_dev",
		"virtio_net", "net_failover", "failover", "virtio_blk", "virtio_scsi", "nvme", "wireguard",
	} {
		assert.True(t, shipped[want], "%s is not in the initramfs", want)
	}

	// The agent finds drivers through modules.alias, which depmod made.
	assert.Contains(t, string(files[mods+"modules.alias"].data), "virtio:d00000001v* virtio_net")

	f, err := pe.Open(res.UKI)
	require.NoError(t, err)

	defer f.Close()

	assert.Equal(t, uint16(pe.IMAGE_FILE_MACHINE_ARM64), f.Machine)

	kernel, err := os.ReadFile(k.Image)
	require.NoError(t, err)

	names := make([]string, 0, len(f.Sections))

	for _, s := range f.Sections {
		names = append(names, s.Name)

		if s.Name == ".linux" {
			data, err := s.Data()
			require.NoError(t, err)
			assert.True(t, bytes.Equal(kernel, data[:len(kernel)]), ".linux is not the kernel")
		}
	}

	assert.Equal(t, []string{".text", ".data", ".osrel", ".cmdline", ".linux", ".initrd"}, names)
}
