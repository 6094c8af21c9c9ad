package providerimage_test

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
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

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/imager/internal/providerimage"
)

const created = 1700000000

// fakeELF writes the smallest ELF64 executable debug/elf reads: a header and one program
// header (PT_LOAD, or PT_INTERP for a dynamically linked one), then payload, so that
// two binaries differ.
func fakeELF(t *testing.T, dir, file string, machine elf.Machine, dynamic bool, payload string) string {
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

	b.WriteString(payload)

	p := filepath.Join(dir, file)
	require.NoError(t, os.WriteFile(p, b.Bytes(), 0o755))

	return p
}

// fixture lays out what a build reads, as a Debian host and make agent-initramfs would:
// iPXE binaries (ipxe.efi a symlink out of the directory, as Debian's is), the agent's
// assets with the build's stamp beside them, a CA bundle, two static binaries.
func fixture(t *testing.T) providerimage.Options {
	t.Helper()

	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))

		return p
	}

	write("ipxe/undionly.kpxe", "BIOS iPXE")
	write("ipxe/snponly.efi", "SNP iPXE")
	write("ipxe/ipxe.pxe", "not shipped")
	require.NoError(t, os.Symlink(write("boot/ipxe.efi", "UEFI iPXE"), filepath.Join(dir, "ipxe", "ipxe.efi")))

	write("agent/vmlinuz-amd64", "KERNEL")
	write("agent/initramfs-amd64.zst", "INITRAMFS")
	write("agent/cmdline-amd64", "console=ttyS0\n")
	write("agent/.initramfs-amd64.stamp", "not shipped")

	return providerimage.Options{
		Provider:    fakeELF(t, dir, "anvil-provider", elf.EM_X86_64, false, "the provider"),
		OmniAdapter: fakeELF(t, dir, "omni-adapter", elf.EM_X86_64, false, "the Omni adapter"),
		AgentAssets: filepath.Join(dir, "agent"),
		IPXEDir:     filepath.Join(dir, "ipxe"),
		IPXEFiles:   providerimage.DefaultIPXEFiles,
		CABundle:    write("ca-certificates.crt", "-----BEGIN CERTIFICATE-----\n"),
		Arch:        "amd64",
		Version:     "v0.3.0",
		Revision:    "0123456789abcdef0123456789abcdef01234567",
		Created:     time.Unix(created, 0),
	}
}

func build(t *testing.T, opts providerimage.Options) v1.Image {
	t.Helper()

	img, err := providerimage.Build(t.Context(), opts)
	require.NoError(t, err)

	return img
}

func TestImageConfig(t *testing.T) {
	t.Parallel()

	cfg, err := build(t, fixture(t)).ConfigFile()
	require.NoError(t, err)

	assert.Equal(t, "amd64", cfg.Architecture)
	assert.Equal(t, "linux", cfg.OS)
	assert.Equal(t, time.Unix(created, 0).UTC(), cfg.Created.UTC())

	c := cfg.Config
	assert.Equal(t, []string{"/usr/bin/anvil-provider"}, c.Entrypoint)
	assert.Empty(t, c.Cmd, "flags are the user's")
	assert.Equal(t, "10000:10000", c.User, "numeric, so that runAsNonRoot can check it")
	assert.Equal(t, "/var/lib/anvil", c.WorkingDir)
	assert.Equal(t, map[string]struct{}{"/var/lib/anvil": {}}, c.Volumes)
	assert.Equal(t, []string{
		"PATH=/usr/bin",
		"SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
		"ANVIL_STATE_DIR=/var/lib/anvil",
		"ANVIL_AGENT_ASSETS_DIR=/usr/share/anvil/agent",
		"ANVIL_TFTP_ROOT=/usr/share/anvil/ipxe",
		"ANVIL_OMNI_ADAPTER=/usr/bin/omni-adapter",
	}, c.Env)
	assert.Equal(t, map[string]struct{}{"67/udp": {}, "69/udp": {}, "4011/udp": {}, "50042/tcp": {}, "50043/tcp": {}}, c.ExposedPorts)
	assert.Equal(t, map[string]string{
		"org.opencontainers.image.title":       "anvil-provider",
		"org.opencontainers.image.description": c.Labels["org.opencontainers.image.description"],
		"org.opencontainers.image.version":     "v0.3.0",
		"org.opencontainers.image.revision":    "0123456789abcdef0123456789abcdef01234567",
		"org.opencontainers.image.source":      "https://github.com/anvil-metal/anvil",
		"org.opencontainers.image.created":     "2023-11-14T22:13:20Z",
	}, c.Labels)
	assert.NotEmpty(t, c.Labels["org.opencontainers.image.description"])

	comments := make([]string, 0, len(cfg.History))
	for _, h := range cfg.History {
		comments = append(comments, h.Comment)
		assert.Equal(t, time.Unix(created, 0).UTC(), h.Created.UTC())
	}

	assert.Equal(t, []string{"base", "ipxe", "agent", "omni-adapter", "provider"}, comments, "what changes least first")
}

func TestMediaTypes(t *testing.T) {
	t.Parallel()

	img := build(t, fixture(t))

	mt, err := img.MediaType()
	require.NoError(t, err)
	assert.Equal(t, types.OCIManifestSchema1, mt)

	m, err := img.Manifest()
	require.NoError(t, err)
	assert.Equal(t, types.OCIConfigJSON, m.Config.MediaType)
	require.Len(t, m.Layers, 5)

	for _, l := range m.Layers {
		assert.Equal(t, types.OCILayer, l.MediaType)
	}
}

// file is an entry of the image's filesystem as the test compares it.
type file struct {
	Mode  string
	Owner string
	Data  string
}

// rootfs reads the image's filesystem, layers flattened as a runtime unpacks them, and
// checks on the way what every entry shares: the time, numeric owners only.
func rootfs(t *testing.T, img v1.Image) (map[string]file, map[string]map[string]string) {
	t.Helper()

	rc := mutate.Extract(img)
	defer rc.Close()

	files := map[string]file{}
	pax := map[string]map[string]string{}
	tr := tar.NewReader(rc)

	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}

		require.NoError(t, err)

		assert.Equal(t, int64(created), h.ModTime.Unix(), h.Name)
		assert.Empty(t, h.Uname+h.Gname, h.Name)

		data, err := io.ReadAll(tr)
		require.NoError(t, err)

		files[h.Name] = file{h.FileInfo().Mode().String(), fmt.Sprintf("%d:%d", h.Uid, h.Gid), string(data)}

		if len(h.PAXRecords) > 0 {
			pax[h.Name] = h.PAXRecords
		}
	}

	return files, pax
}

func TestImageFiles(t *testing.T) {
	t.Parallel()

	opts := fixture(t)
	files, pax := rootfs(t, build(t, opts))

	read := func(p string) string {
		b, err := os.ReadFile(p)
		require.NoError(t, err)

		return string(b)
	}

	dir := file{"drwxr-xr-x", "0:0", ""}
	passwd := "root:x:0:0:root:/root:/usr/sbin/nologin\n" +
		"anvil:x:10000:10000:Anvil provider:/var/lib/anvil:/usr/sbin/nologin\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"

	assert.Equal(t, map[string]file{
		"etc":                                 dir,
		"etc/passwd":                          {"-rw-r--r--", "0:0", passwd},
		"etc/group":                           {"-rw-r--r--", "0:0", "root:x:0:\nanvil:x:10000:\nnogroup:x:65534:\n"},
		"etc/ssl":                             dir,
		"etc/ssl/certs":                       dir,
		"etc/ssl/certs/ca-certificates.crt":   {"-rw-r--r--", "0:0", read(opts.CABundle)},
		"tmp":                                 {"dtrwxrwxrwx", "0:0", ""},
		"var":                                 dir,
		"var/lib":                             dir,
		"var/lib/anvil":                       {"drwxr-x---", "10000:10000", ""},
		"usr":                                 dir,
		"usr/bin":                             dir,
		"usr/bin/anvil-provider":              {"-rwxr-xr-x", "0:0", read(opts.Provider)},
		"usr/bin/omni-adapter":                {"-rwxr-xr-x", "0:0", read(opts.OmniAdapter)},
		"usr/share":                           dir,
		"usr/share/anvil":                     dir,
		"usr/share/anvil/ipxe":                dir,
		"usr/share/anvil/ipxe/undionly.kpxe":  {"-rw-r--r--", "0:0", "BIOS iPXE"},
		"usr/share/anvil/ipxe/ipxe.efi":       {"-rw-r--r--", "0:0", "UEFI iPXE"}, // the symlink's target, copied
		"usr/share/anvil/ipxe/snponly.efi":    {"-rw-r--r--", "0:0", "SNP iPXE"},
		"usr/share/anvil/agent":               dir,
		"usr/share/anvil/agent/vmlinuz-amd64": {"-rw-r--r--", "0:0", "KERNEL"},
		"usr/share/anvil/agent/initramfs-amd64.zst": {"-rw-r--r--", "0:0", "INITRAMFS"},
		"usr/share/anvil/agent/cmdline-amd64":       {"-rw-r--r--", "0:0", "console=ttyS0\n"},
	}, files)

	// What "setcap cap_net_bind_service,cap_net_raw=ep" writes (VFS_CAP_REVISION_2 with
	// the effective flag; bits 10 and 13 permitted), read back with getfattr.
	want, err := hex.DecodeString("0100000200240000000000000000000000000000")
	require.NoError(t, err)
	assert.Equal(t, map[string]map[string]string{
		"usr/bin/anvil-provider": {"SCHILY.xattr.security.capability": string(want)},
	}, pax, "only the provider has capabilities")
}

// TestLayersSorted checks each layer on its own: entries in walk order, each directory
// before what it holds.
func TestLayersSorted(t *testing.T) {
	t.Parallel()

	layers, err := build(t, fixture(t)).Layers()
	require.NoError(t, err)

	for _, l := range layers {
		rc, err := l.Uncompressed()
		require.NoError(t, err)

		var names []string

		tr := tar.NewReader(rc)

		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}

			require.NoError(t, err)

			names = append(names, h.Name)
		}

		rc.Close()

		seen := map[string]bool{}

		for i, n := range names {
			if parent := filepath.Dir(strings.TrimSuffix(n, "/")); parent != "." {
				assert.True(t, seen[parent+"/"], "%s comes before its directory", n)
			}

			if i > 0 {
				assert.Less(t, strings.ReplaceAll(names[i-1], "/", "\x00"), strings.ReplaceAll(n, "/", "\x00"))
			}

			seen[n] = true
		}
	}
}

func TestRebuildIsByteIdentical(t *testing.T) {
	t.Parallel()

	opts := fixture(t)

	digest := func(o providerimage.Options) v1.Hash {
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
	other.Version = "v0.3.1"
	assert.NotEqual(t, first, digest(other), "the version is in the labels")

	// The layout on disk too: written twice, the same files.
	dir := filepath.Join(t.TempDir(), "image")
	read := func() map[string][]byte {
		require.NoError(t, ociimage.WriteLayout(t.Context(), dir, build(t, opts), "v0.3.0"))

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
	assert.Equal(t, "v0.3.0", m.Manifests[0].Annotations["org.opencontainers.image.ref.name"])
}

// TestRegistryRoundTrip pushes to an in-process registry and pulls the image back.
func TestRegistryRoundTrip(t *testing.T) {
	t.Parallel()

	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)

	img := build(t, fixture(t))
	ref := strings.TrimPrefix(srv.URL, "http://") + "/anvil/anvil-provider:v0.3.0"

	pushed, err := ociimage.Push(t.Context(), img, ref, true)
	require.NoError(t, err)

	want, err := img.Digest()
	require.NoError(t, err)
	assert.Equal(t, want.String(), pushed.DigestStr())

	wantCfg, err := img.ConfigFile()
	require.NoError(t, err)

	wantFiles, _ := rootfs(t, img)

	for _, r := range []string{ref, pushed.String()} {
		parsed, err := name.ParseReference(r, name.Insecure)
		require.NoError(t, err)

		pulled, err := remote.Image(parsed, remote.WithContext(t.Context()))
		require.NoError(t, err)

		got, err := pulled.Digest()
		require.NoError(t, err)
		assert.Equal(t, want, got, r)

		cfg, err := pulled.ConfigFile()
		require.NoError(t, err)
		assert.Equal(t, wantCfg.Config, cfg.Config, r)

		gotFiles, _ := rootfs(t, pulled)
		assert.Equal(t, wantFiles, gotFiles, r)
	}
}

func TestTarball(t *testing.T) {
	t.Parallel()

	img := build(t, fixture(t))
	p := filepath.Join(t.TempDir(), "out", "image.tar")

	require.NoError(t, providerimage.WriteTarball(p, img, "v0.3.0"))

	tag, err := name.NewTag("anvil-provider:v0.3.0")
	require.NoError(t, err)

	loaded, err := tarball.ImageFromPath(p, &tag)
	require.NoError(t, err)

	// docker load's format has no manifest of its own: the config and layers are the same.
	for _, get := range []func(v1.Image) (v1.Hash, error){v1.Image.ConfigName, firstLayer, lastLayer} {
		want, err := get(img)
		require.NoError(t, err)

		got, err := get(loaded)
		require.NoError(t, err)
		assert.Equal(t, want, got)
	}
}

func firstLayer(img v1.Image) (v1.Hash, error) { return layerDigest(img, 0) }
func lastLayer(img v1.Image) (v1.Hash, error)  { return layerDigest(img, -1) }

func layerDigest(img v1.Image, i int) (v1.Hash, error) {
	layers, err := img.Layers()
	if err != nil {
		return v1.Hash{}, err
	}

	if i < 0 {
		i += len(layers)
	}

	return layers[i].Digest()
}

func TestInputsRefused(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name    string
		mutate  func(t *testing.T, o *providerimage.Options)
		wantErr string
	}{
		{"no version", func(_ *testing.T, o *providerimage.Options) { o.Version = "" }, "needs a version"},
		{"no provider", func(_ *testing.T, o *providerimage.Options) { o.Provider = "" }, "no provider binary"},
		{"dynamic provider", func(t *testing.T, o *providerimage.Options) {
			o.Provider = fakeELF(t, t.TempDir(), "provider", elf.EM_X86_64, true, "")
		}, "dynamically linked; build it with CGO_ENABLED=0"},
		{"arm64 Omni adapter", func(t *testing.T, o *providerimage.Options) {
			o.OmniAdapter = fakeELF(t, t.TempDir(), "omni-adapter", elf.EM_AARCH64, false, "")
		}, "built for EM_AARCH64, not amd64"},
		{"not ELF", func(_ *testing.T, o *providerimage.Options) { o.Provider = o.CABundle }, "as an ELF executable"},
		{"unknown arch", func(_ *testing.T, o *providerimage.Options) { o.Arch = "riscv64" }, "unsupported architecture"},
		{"no agent assets", func(t *testing.T, o *providerimage.Options) { o.AgentAssets = t.TempDir() }, "no agent kernel and initramfs for amd64"},
		{"no agent directory", func(t *testing.T, o *providerimage.Options) {
			o.AgentAssets = filepath.Join(t.TempDir(), "nope")
		}, "make agent-initramfs builds them"},
		{"missing iPXE binary", func(_ *testing.T, o *providerimage.Options) {
			o.IPXEFiles = []string{"undionly.kpxe", "ipxe-arm64.efi"}
		}, "Debian's ipxe package"},
		{"iPXE path", func(_ *testing.T, o *providerimage.Options) { o.IPXEFiles = []string{"../agent/vmlinuz-amd64"} }, "not a file name"},
		{"no CA bundle", func(_ *testing.T, o *providerimage.Options) { o.CABundle = "" }, "no CA bundle"},
		{"missing CA bundle", func(t *testing.T, o *providerimage.Options) {
			o.CABundle = filepath.Join(t.TempDir(), "nope.crt")
		}, "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			opts := fixture(t)
			tc.mutate(t, &opts)

			_, err := providerimage.Build(t.Context(), opts)
			assert.ErrorContains(t, err, tc.wantErr)
		})
	}
}
