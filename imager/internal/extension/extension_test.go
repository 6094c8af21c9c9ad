package extension_test

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anvil-metal/anvil/imager/internal/ociimage"

	"github.com/blang/semver/v4"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/siderolabs/talos/pkg/machinery/extensions"
	"github.com/siderolabs/talos/pkg/machinery/extensions/services"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v4"

	"github.com/anvil-metal/anvil/imager/internal/extension"
	"github.com/anvil-metal/anvil/internal/talosext"
)

// fakeELF writes the smallest ELF64 executable debug/elf reads: a header and one program
// header (PT_LOAD, or PT_INTERP for a dynamically linked one), then a payload.
func fakeELF(t *testing.T, machine elf.Machine, dynamic bool) string {
	t.Helper()

	const ehsize, phentsize = 64, 56

	var b bytes.Buffer

	ident := [elf.EI_NIDENT]byte{0x7f, 'E', 'L', 'F', byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)}
	b.Write(ident[:])

	le := binary.LittleEndian
	for _, v := range []any{
		uint16(elf.ET_EXEC), uint16(machine), uint32(elf.EV_CURRENT),
		uint64(0x400000), uint64(ehsize), uint64(0), // entry, phoff, shoff
		uint32(0), uint16(ehsize), uint16(phentsize), uint16(1), // flags, ehsize, phentsize, phnum
		uint16(0), uint16(0), uint16(0), // shentsize, shnum, shstrndx
	} {
		require.NoError(t, binary.Write(&b, le, v))
	}

	typ := elf.PT_LOAD
	if dynamic {
		typ = elf.PT_INTERP
	}

	for _, v := range []any{
		uint32(typ), uint32(elf.PF_R | elf.PF_X), uint64(0), // type, flags, offset
		uint64(0x400000), uint64(0x400000), uint64(128), uint64(128), uint64(0x1000), // vaddr, paddr, filesz, memsz, align
	} {
		require.NoError(t, binary.Write(&b, le, v))
	}

	b.WriteString("metal-agent, or as good as\n")

	p := filepath.Join(t.TempDir(), "metal-agent")
	require.NoError(t, os.WriteFile(p, b.Bytes(), 0o755))

	return p
}

func build(t *testing.T, opts extension.Options) v1.Image {
	t.Helper()

	img, err := extension.Build(t.Context(), opts)
	require.NoError(t, err)

	return img
}

func options(t *testing.T) extension.Options {
	t.Helper()

	return extension.Options{Agent: fakeELF(t, elf.EM_X86_64, false), Version: "v0.1.0", Arch: "amd64", Created: time.Unix(1700000000, 0)}
}

// entry is a layer entry as the test compares it; Owner is uid:gid and any user and
// group names.
type entry struct {
	Name  string
	Mode  int64
	Owner string
	MTime int64
}

// layerFiles reads the image's only layer: its entries in order, and the files' contents.
func layerFiles(t *testing.T, img v1.Image) ([]entry, map[string][]byte) {
	t.Helper()

	layers, err := img.Layers()
	require.NoError(t, err)
	require.Len(t, layers, 1)

	rc, err := layers[0].Uncompressed()
	require.NoError(t, err)

	defer rc.Close()

	var entries []entry

	contents := map[string][]byte{}
	tr := tar.NewReader(rc)

	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}

		require.NoError(t, err)

		entries = append(entries, entry{h.Name, h.Mode, fmt.Sprintf("%d:%d%s%s", h.Uid, h.Gid, h.Uname, h.Gname), h.ModTime.Unix()})

		if h.Typeflag == tar.TypeReg {
			contents[h.Name], err = io.ReadAll(tr)
			require.NoError(t, err)
		}
	}

	return entries, contents
}

func TestLayerHoldsExactlyTheExtension(t *testing.T) {
	t.Parallel()

	opts := options(t)
	entries, contents := layerFiles(t, build(t, opts))

	const mtime = 1700000000

	dir := func(name string) entry { return entry{name, 0o755, "0:0", mtime} }

	assert.Equal(t, []entry{
		{"manifest.yaml", 0o644, "0:0", mtime},
		dir("rootfs/"),
		dir("rootfs/usr/"),
		dir("rootfs/usr/local/"),
		dir("rootfs/usr/local/etc/"),
		dir("rootfs/usr/local/etc/containers/"),
		{"rootfs/usr/local/etc/containers/metal-agent.yaml", 0o644, "0:0", mtime},
		{"rootfs/usr/local/etc/is-metal-agent", 0o644, "0:0", mtime},
		dir("rootfs/usr/local/lib/"),
		dir("rootfs/usr/local/lib/containers/"),
		dir("rootfs/usr/local/lib/containers/metal-agent/"),
		{"rootfs/usr/local/lib/containers/metal-agent/metal-agent", 0o755, "0:0", mtime},
	}, entries)

	agent, err := os.ReadFile(opts.Agent)
	require.NoError(t, err)
	assert.Equal(t, agent, contents[extension.AgentPath], "the agent is shipped as is")
	assert.Empty(t, contents[extension.FlagPath])
	assert.Equal(t, extension.ServiceYAML(), contents[extension.ServicePath])
}

func TestImageConfig(t *testing.T) {
	t.Parallel()

	img := build(t, options(t))

	cfg, err := img.ConfigFile()
	require.NoError(t, err)
	assert.Equal(t, "amd64", cfg.Architecture)
	assert.Equal(t, "linux", cfg.OS)
	assert.Equal(t, time.Unix(1700000000, 0).UTC(), cfg.Created.UTC())

	mt, err := img.MediaType()
	require.NoError(t, err)
	assert.Equal(t, types.OCIManifestSchema1, mt)

	m, err := img.Manifest()
	require.NoError(t, err)
	assert.Equal(t, types.OCIConfigJSON, m.Config.MediaType)
	assert.Equal(t, types.OCILayer, m.Layers[0].MediaType)
}

// unpack writes the layer out as Talos' installer does before it loads an extension.
func unpack(t *testing.T, img v1.Image) string {
	t.Helper()

	dir := filepath.Join(t.TempDir(), extension.Name)
	_, contents := layerFiles(t, img)

	for name, data := range contents {
		mode := fs.FileMode(0o644)
		if name == extension.AgentPath {
			mode = 0o755
		}

		require.NoError(t, os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), data, mode))
	}

	return dir
}

// TestTalosLoadsAndValidates checks the image as Talos checks an extension: its loader
// (manifest version, nothing but manifest.yaml and rootfs), then its validation of the
// version constraint and of every path in the rootfs.
func TestTalosLoadsAndValidates(t *testing.T) {
	t.Parallel()

	ext, err := extensions.Load(unpack(t, build(t, options(t))))
	require.NoError(t, err)

	assert.Equal(t, extension.Name, ext.Manifest.Metadata.Name, "the name Omni looks for")
	assert.Equal(t, "v0.1.0", ext.Manifest.Metadata.Version)
	assert.NotEmpty(t, ext.Manifest.Metadata.Author)
	assert.NotEmpty(t, ext.Manifest.Metadata.Description)

	for _, tc := range []struct {
		talos   string
		wantErr string
	}{
		{"1.9.0", ""},
		{"1.13.2", ""},
		{"1.8.4", "can't be satisfied with Talos version 1.8.4"},
	} {
		version := semver.MustParse(tc.talos)
		err := ext.Validate(extensions.WithValidateConstraints(), extensions.WithValidateContents(), extensions.WithTalosVersion(&version))

		if tc.wantErr == "" {
			assert.NoError(t, err, tc.talos)
		} else {
			assert.ErrorContains(t, err, tc.wantErr, tc.talos)
		}
	}
}

// TestServiceDefinition reads the service as Talos' extension service controller does,
// more strictly (unknown fields refused), and checks what the agent needs of it.
func TestServiceDefinition(t *testing.T) {
	t.Parallel()

	dir := unpack(t, build(t, options(t)))

	var spec services.Spec

	dec := yaml.NewDecoder(bytes.NewReader(extension.ServiceYAML()))
	dec.KnownFields(true)
	require.NoError(t, dec.Decode(&spec))
	require.NoError(t, spec.Validate())

	assert.Equal(t, extension.Name, spec.Name, "the service is named after the extension")
	assert.Equal(t, services.RestartAlways, spec.Restart)
	assert.Contains(t, spec.Container.Args, "--mode=extension")
	assert.Contains(t, spec.Container.Args, "--dry-run=false")
	assert.NotContains(t, spec.Container.Security.MaskedPaths, "/sys/firmware", "SMBIOS is read from /sys/firmware")

	// The entrypoint is relative to the container's rootfs, where the agent is.
	info, err := os.Stat(filepath.Join(dir, extension.ContainerDir, spec.Container.Entrypoint))
	require.NoError(t, err)
	assert.Equal(t, fs.FileMode(0o755), info.Mode().Perm())

	mounts := map[string][]string{}
	for _, m := range spec.Container.Mounts {
		assert.Equal(t, m.Source, m.Destination)
		assert.Equal(t, "bind", m.Type)
		mounts[m.Destination] = m.Options
	}

	assert.Contains(t, mounts["/dev"], "rw", "disks are wiped and /dev/ipmi0 written")
	assert.Contains(t, mounts, "/system/run/machined/machine.sock", "reboot and power-off go through machined")
}

func TestRebuildIsByteIdentical(t *testing.T) {
	t.Parallel()

	opts := options(t)

	digest := func(o extension.Options) v1.Hash {
		d, err := build(t, o).Digest()
		require.NoError(t, err)

		return d
	}

	first := digest(opts)
	assert.Equal(t, first, digest(opts), "the same inputs, the same image")

	later := opts
	later.Created = opts.Created.Add(time.Second)
	assert.NotEqual(t, first, digest(later), "the time is in the image")

	other := opts
	other.Version = "v0.1.1"
	assert.NotEqual(t, first, digest(other), "the version is in the manifest")

	// The layout on disk too: written twice, the same files.
	dir := filepath.Join(t.TempDir(), "agent-extension")
	read := func() map[string][]byte {
		require.NoError(t, ociimage.WriteLayout(t.Context(), dir, build(t, opts), "v0.1.0"))

		files := map[string][]byte{}
		require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}

			files[p], err = os.ReadFile(p)

			return err
		}))

		return files
	}

	assert.Equal(t, read(), read())

	idx, err := layout.ImageIndexFromPath(dir)
	require.NoError(t, err)

	m, err := idx.IndexManifest()
	require.NoError(t, err)
	require.Len(t, m.Manifests, 1)
	assert.Equal(t, first, m.Manifests[0].Digest)
	assert.Equal(t, "v0.1.0", m.Manifests[0].Annotations["org.opencontainers.image.ref.name"])
}

// TestRegistryRoundTrip pushes to an in-process registry and pulls the image back.
func TestRegistryRoundTrip(t *testing.T) {
	t.Parallel()

	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)

	img := build(t, options(t))
	ref := strings.TrimPrefix(srv.URL, "http://") + "/anvil/metal-agent:v0.1.0"

	pushed, err := ociimage.Push(t.Context(), img, ref, true)
	require.NoError(t, err)

	want, err := img.Digest()
	require.NoError(t, err)
	assert.Equal(t, want.String(), pushed.DigestStr())

	for _, r := range []string{ref, pushed.String()} {
		parsed, err := name.ParseReference(r, name.Insecure)
		require.NoError(t, err)

		pulled, err := remote.Image(parsed, remote.WithContext(t.Context()))
		require.NoError(t, err)

		got, err := pulled.Digest()
		require.NoError(t, err)
		assert.Equal(t, want, got, r)

		wantEntries, wantFiles := layerFiles(t, img)
		gotEntries, gotFiles := layerFiles(t, pulled)
		assert.Equal(t, wantEntries, gotEntries, r)
		assert.Equal(t, wantFiles, gotFiles, r)
	}
}

func TestAgentRefused(t *testing.T) {
	t.Parallel()

	script := filepath.Join(t.TempDir(), "agent.sh")
	require.NoError(t, os.WriteFile(script, []byte("#!/bin/sh\n"), 0o755))

	for _, tc := range []struct {
		name    string
		agent   string
		arch    string
		wantErr string
	}{
		{"missing", filepath.Join(t.TempDir(), "nope"), "amd64", "no such file"},
		{"not given", "", "amd64", "no agent binary"},
		{"not ELF", script, "amd64", "as an ELF executable"},
		{"dynamically linked", fakeELF(t, elf.EM_X86_64, true), "amd64", "dynamically linked; build it with CGO_ENABLED=0"},
		{"another architecture", fakeELF(t, elf.EM_AARCH64, false), "amd64", "built for EM_AARCH64, not amd64"},
		{"unknown architecture", fakeELF(t, elf.EM_X86_64, false), "riscv64", `unsupported architecture "riscv64"`},
	} {
		opts := options(t)
		opts.Agent, opts.Arch = tc.agent, tc.arch

		_, err := extension.Build(t.Context(), opts)
		assert.ErrorContains(t, err, tc.wantErr, tc.name)
	}

	arm := options(t)
	arm.Agent, arm.Arch = fakeELF(t, elf.EM_AARCH64, false), "arm64"
	cfg, err := build(t, arm).ConfigFile()
	require.NoError(t, err)
	assert.Equal(t, "arm64", cfg.Architecture)
}

// TestLayoutReadAsTalosLoadsIt: the layout make agent-extension writes is what the lab's
// factory stand-in (and anything else that lays extensions over Talos with
// internal/talosext) reads: the manifest's metadata, the agent executable, the service
// and the flag file that puts Talos in agent mode.
func TestLayoutReadAsTalosLoadsIt(t *testing.T) {
	t.Parallel()

	opts := options(t)
	dir := filepath.Join(t.TempDir(), "agent-extension")
	require.NoError(t, ociimage.WriteLayout(t.Context(), dir, build(t, opts), "v0.1.0"))

	ext, err := talosext.FromLayout(dir, filepath.Join(t.TempDir(), "unpacked"), "amd64")
	require.NoError(t, err)

	assert.Equal(t, extension.Name, ext.Metadata.Name)
	assert.Equal(t, "v0.1.0", ext.Metadata.Version)
	assert.Equal(t, extension.TalosConstraint, ext.Metadata.Compatibility.Talos.Version)

	rootfs := func(p string) string { return filepath.Join(ext.Rootfs, strings.TrimPrefix(p, "rootfs/")) }

	agent, err := os.Stat(rootfs(extension.AgentPath))
	require.NoError(t, err)
	assert.Equal(t, fs.FileMode(0o755), agent.Mode().Perm())

	b, err := os.ReadFile(rootfs(extension.AgentPath))
	require.NoError(t, err)

	want, err := os.ReadFile(opts.Agent)
	require.NoError(t, err)
	assert.Equal(t, want, b, "the agent binary")

	service, err := os.ReadFile(rootfs(extension.ServicePath))
	require.NoError(t, err)
	assert.Equal(t, extension.ServiceYAML(), service)

	_, err = os.Stat(rootfs(extension.FlagPath))
	assert.NoError(t, err, "the agent mode's flag file")

	_, err = talosext.FromLayout(dir, filepath.Join(t.TempDir(), "unpacked"), "arm64")
	assert.ErrorContains(t, err, "for amd64, not arm64")
}
