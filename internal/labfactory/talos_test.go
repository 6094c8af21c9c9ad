package labfactory_test

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"debug/pe"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/siderolabs/image-factory/pkg/client"
	"github.com/siderolabs/image-factory/pkg/schematic"
	"github.com/siderolabs/talos/pkg/machinery/extensions"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/internal/initramfs"
	"github.com/anvil-metal/anvil/internal/initramfs/initramfstest"
	"github.com/anvil-metal/anvil/internal/installerimage"
	"github.com/anvil-metal/anvil/internal/labfactory"
	"github.com/anvil-metal/anvil/internal/talosext"
	"github.com/anvil-metal/anvil/internal/uki/ukitest"
)

const realVersion = "v1.13.9"

// TestTalosCmdline: the factory's kernel command line for a schematic's real Talos, as
// Talos' imager builds it (pkg/imager's buildCmdline over machinery's quirks and
// kernel.DefaultArgs, and the metal platform's consoles).
func TestTalosCmdline(t *testing.T) {
	t.Parallel()

	// Talos v1.13's defaults after the platform and its console.
	const defaults113 = "init_on_alloc=1 slab_nomerge pti=on consoleblank=0 nvme_core.io_timeout=4294967295 printk.devkmsg=on selinux=1 module.sig_enforce=1 proc_mem.force_override=never"

	for _, tc := range []struct {
		name, version, arch string
		extra               []string
		want                string
	}{
		{
			name: "v1.13.9 metal amd64", version: "v1.13.9", arch: "amd64",
			want: "talos.platform=metal console=tty0 " + defaults113,
		},
		{
			name: "a console replaces the platform's", version: "v1.13.9", arch: "amd64", extra: []string{"console=ttyS0"},
			want: "talos.platform=metal console=ttyS0 " + defaults113,
		},
		{
			name: "two consoles replace it, other arguments last", version: "v1.13.9", arch: "amd64",
			extra: []string{"console=ttyS0,115200n8", "talos.dashboard.disabled=1", "console=tty0", "no_timer_check"},
			want:  "talos.platform=metal console=ttyS0,115200n8 console=tty0 " + defaults113 + " talos.dashboard.disabled=1 no_timer_check",
		},
		{
			name: "-arg deletes one", version: "v1.13.9", arch: "amd64", extra: []string{"-selinux", "-console"},
			want: "talos.platform=metal init_on_alloc=1 slab_nomerge pti=on consoleblank=0 nvme_core.io_timeout=4294967295 printk.devkmsg=on module.sig_enforce=1 proc_mem.force_override=never",
		},
		{
			name: "a platform replaces metal", version: "v1.13.9", arch: "amd64", extra: []string{"talos.platform=equinixMetal"},
			want: "talos.platform=equinixMetal console=tty0 " + defaults113,
		},
		{
			name: "arm64's consoles", version: "v1.13.9", arch: "arm64",
			want: "talos.platform=metal console=ttyAMA0 console=tty0 " + defaults113,
		},
		{
			name: "arm64 with a console", version: "v1.13.9", arch: "arm64", extra: []string{"console=ttyAMA1"},
			want: "talos.platform=metal console=ttyAMA1 " + defaults113,
		},
		{
			// Before 1.8 the metal platform had a serial console too; before 1.10 no SELinux,
			// before 1.11 IMA; before 1.12 no module signatures enforced, before 1.13 no
			// proc_mem.
			name: "v1.7.x keeps console=ttyS0", version: "v1.7.6", arch: "amd64",
			want: "talos.platform=metal console=ttyS0 console=tty0 init_on_alloc=1 slab_nomerge pti=on consoleblank=0 nvme_core.io_timeout=4294967295 printk.devkmsg=on ima_template=ima-ng ima_appraise=fix ima_hash=sha512",
		},
		{
			name: "v1.9.0, the stand-in's version", version: "v1.9.0", arch: "amd64",
			want: "talos.platform=metal console=tty0 init_on_alloc=1 slab_nomerge pti=on consoleblank=0 nvme_core.io_timeout=4294967295 printk.devkmsg=on ima_template=ima-ng ima_appraise=fix ima_hash=sha512",
		},
		{
			name: "v1.14.0 drops init_on_alloc and the NVMe timeout", version: "v1.14.0", arch: "amd64",
			want: "talos.platform=metal console=tty0 slab_nomerge pti=on consoleblank=0 printk.devkmsg=on selinux=1 module.sig_enforce=1 proc_mem.force_override=never",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			got, err := labfactory.TalosCmdline(tc.version, "metal", tc.arch, tc.extra)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

// makeTalos writes a fake make talos output directory: small kernel and initramfs, a base
// layer, a PE stub, os-release and talos.json.
func makeTalos(t *testing.T) string {
	t.Helper()

	dir := t.TempDir()

	base := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(base, "usr", "bin"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(base, "usr", "bin", "installer"), []byte("\x7fELF installer"), 0o755))
	require.NoError(t, os.Symlink("installer", filepath.Join(base, "usr", "bin", "imager")))

	var layer bytes.Buffer

	require.NoError(t, installerimage.WriteTree(&layer, base, time.Unix(0, 0)))

	for name, content := range map[string][]byte{
		"vmlinuz-amd64":      []byte("MZ real Talos kernel"),
		"initramfs-amd64.xz": []byte("real Talos initramfs"),
		"installer-base.tar": layer.Bytes(),
		"uki-stub-amd64.efi": ukitest.Stub(t, ukitest.StubSpec{}),
		"os-release":         []byte("NAME=\"Talos\"\nID=talos\nVERSION_ID=" + realVersion + "\n"),
		"talos.json":         []byte(`{"talosVersion":"` + realVersion + `","kernelVersion":"6.99.0"}`),
	} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), content, 0o644))
	}

	return dir
}

func TestNewTalos(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name    string
		breakIt func(dir string) error
		err     string
	}{
		{name: "no talos.json", breakIt: func(dir string) error { return os.Remove(filepath.Join(dir, "talos.json")) }, err: "make talos"},
		{name: "talos.json not JSON", breakIt: func(dir string) error {
			return os.WriteFile(filepath.Join(dir, "talos.json"), []byte("talos"), 0o644)
		}, err: "error decoding talos.json"},
		{name: "no version", breakIt: func(dir string) error {
			return os.WriteFile(filepath.Join(dir, "talos.json"), []byte(`{"kernelVersion":"6.99"}`), 0o644)
		}, err: "names no Talos version"},
		{name: "not a version", breakIt: func(dir string) error {
			return os.WriteFile(filepath.Join(dir, "talos.json"), []byte(`{"talosVersion":"1.13"}`), 0o644)
		}, err: "names no Talos version"},
		{name: "no kernel", breakIt: func(dir string) error { return os.Remove(filepath.Join(dir, "vmlinuz-amd64")) }, err: "vmlinuz-amd64"},
		{name: "no initramfs", breakIt: func(dir string) error { return os.Remove(filepath.Join(dir, "initramfs-amd64.xz")) }, err: "initramfs-amd64.xz"},
		{name: "no base layer", breakIt: func(dir string) error { return os.Remove(filepath.Join(dir, "installer-base.tar")) }, err: "installer-base.tar"},
		{name: "no stub", breakIt: func(dir string) error { return os.Remove(filepath.Join(dir, "uki-stub-amd64.efi")) }, err: "uki-stub-amd64.efi"},
		{name: "no os-release", breakIt: func(dir string) error { return os.Remove(filepath.Join(dir, "os-release")) }, err: "os-release"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			dir := makeTalos(t)
			require.NoError(t, tc.breakIt(dir))

			_, err := labfactory.NewTalos(dir, t.TempDir())
			assert.ErrorContains(t, err, tc.err)
		})
	}

	tal, err := labfactory.NewTalos(makeTalos(t), filepath.Join(t.TempDir(), "new", "work"))
	require.NoError(t, err)
	assert.Equal(t, realVersion, tal.Version())
}

// realFactory is the factory with real Talos beside the stand-in's assets, and a
// registered schematic with a console and an extension.
type realFactory struct {
	f       *labfactory.Factory
	srv     *httptest.Server
	talos   string
	id      string
	extra   []string
	plainID string
}

func newRealFactory(t *testing.T) *realFactory {
	t.Helper()

	standin := t.TempDir()
	for name, content := range map[string]string{"kernel-amd64": "STANDIN-KERNEL", "initramfs-amd64.xz": "STANDIN-INITRAMFS"} {
		require.NoError(t, os.WriteFile(filepath.Join(standin, name), []byte(content), 0o644))
	}

	dir := makeTalos(t)

	tal, err := labfactory.NewTalos(dir, t.TempDir())
	require.NoError(t, err)

	tal.WithExtension("metal-agent", talosext.Extension{
		Metadata: extensions.Metadata{Name: "metal-agent", Version: "v0.1.0"},
		Files:    map[string][]byte{"usr/local/etc/is-metal-agent": nil},
	})

	f := labfactory.New(labfactory.WithAssets(standin), labfactory.WithTalos(tal))
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)

	c, err := client.New(srv.URL)
	require.NoError(t, err)

	var sc schematic.Schematic

	sc.Customization.ExtraKernelArgs = []string{"console=ttyS0", "talos.dashboard.disabled=1"}
	sc.Customization.SystemExtensions.OfficialExtensions = []string{"metal-agent"}

	id, _, err := c.SchematicCreate(t.Context(), sc)
	require.NoError(t, err)

	plain, _, err := c.SchematicCreate(t.Context(), schematic.Schematic{})
	require.NoError(t, err)

	return &realFactory{f: f, srv: srv, talos: dir, id: id, extra: sc.Customization.ExtraKernelArgs, plainID: plain}
}

func get(t *testing.T, u string) (int, []byte) {
	t.Helper()

	resp, err := http.Get(u)
	require.NoError(t, err)

	defer resp.Body.Close()

	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)

	return resp.StatusCode, b
}

// TestRealTalos: the factory serves real Talos for its version — the kernel as it is,
// the schematic's initramfs (Talos' own, then the extension layer naming the schematic
// and its extensions), the factory's command line and PXE script — and the stand-in for
// its versions.
func TestRealTalos(t *testing.T) {
	t.Parallel()

	if _, err := exec.LookPath("mksquashfs"); err != nil {
		t.Skipf("mksquashfs is missing (make setup installs squashfs-tools): %v", err)
	}

	rf := newRealFactory(t)
	image := rf.srv.URL + "/image/" + rf.id + "/" + realVersion + "/"

	cmdline, err := labfactory.TalosCmdline(realVersion, "metal", "amd64", rf.extra)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(cmdline, "talos.platform=metal console=ttyS0 init_on_alloc=1 slab_nomerge pti=on"), cmdline)

	status, body := get(t, rf.srv.URL+"/versions")
	assert.Equal(t, http.StatusOK, status)
	assert.JSONEq(t, `["v1.9.0","`+realVersion+`"]`, string(body))

	status, body = get(t, image+"kernel-amd64")
	assert.Equal(t, http.StatusOK, status)
	assert.Equal(t, "MZ real Talos kernel", string(body))

	status, body = get(t, image+"cmdline-metal-amd64")
	assert.Equal(t, http.StatusOK, status)
	assert.Equal(t, cmdline, string(body))

	status, body = get(t, rf.srv.URL+"/pxe/"+rf.id+"/"+realVersion+"/metal-amd64")
	assert.Equal(t, http.StatusOK, status)
	assert.Equal(t, "#!ipxe\nimgfree\nkernel "+image+"kernel-amd64 initrd=initramfs-amd64.xz "+cmdline+"\ninitrd "+image+"initramfs-amd64.xz\nboot\n", string(body))

	status, initrd := get(t, image+"initramfs-amd64.xz")
	require.Equal(t, http.StatusOK, status, "%s", initrd)

	base := []byte("real Talos initramfs")
	require.True(t, bytes.HasPrefix(initrd, base), "Talos' initramfs first")

	cfg, images := readExtensionLayer(t, initrd[len(base):])
	require.Len(t, cfg.Layers, 2)
	assert.Equal(t, "000-schematic.sqsh", cfg.Layers[0].Image)
	assert.Equal(t, "schematic", cfg.Layers[0].Metadata.Name)
	assert.Equal(t, rf.id, cfg.Layers[0].Metadata.Version)

	doc, ok := rf.f.Schematic(rf.id)
	require.True(t, ok)

	sc, err := schematic.Unmarshal(doc)
	require.NoError(t, err)

	marshalled, err := sc.Marshal()
	require.NoError(t, err)
	assert.Equal(t, string(marshalled), cfg.Layers[0].Metadata.ExtraInfo, "the schematic's document")
	assert.Equal(t, "001-metal-agent.sqsh", cfg.Layers[1].Image)
	assert.Equal(t, "metal-agent", cfg.Layers[1].Metadata.Name)
	assert.ElementsMatch(t, []string{"000-schematic.sqsh", "001-metal-agent.sqsh", "extensions.yaml"}, images)

	// Asked again: the same bytes, made once.
	_, again := get(t, image+"initramfs-amd64.xz")
	assert.True(t, bytes.Equal(initrd, again))

	// A schematic without extensions: the schematic's layer alone.
	_, plain := get(t, rf.srv.URL+"/image/"+rf.plainID+"/"+realVersion+"/initramfs-amd64.xz")
	require.True(t, bytes.HasPrefix(plain, base))

	cfg, _ = readExtensionLayer(t, plain[len(base):])
	require.Len(t, cfg.Layers, 1)
	assert.Equal(t, rf.plainID, cfg.Layers[0].Metadata.Version)

	// The stand-in's version is untouched: its assets, its own command line.
	standin := rf.srv.URL + "/image/" + rf.id + "/v1.9.0/"

	_, body = get(t, standin+"kernel-amd64")
	assert.Equal(t, "STANDIN-KERNEL", string(body))

	_, body = get(t, standin+"initramfs-amd64.xz")
	assert.Equal(t, "STANDIN-INITRAMFS", string(body))

	_, body = get(t, standin+"cmdline-metal-amd64")
	assert.Contains(t, string(body), labfactory.SchematicArg+"="+rf.id)
	assert.Contains(t, string(body), labfactory.BaseCmdline)

	for path, want := range map[string]int{
		"/image/" + rf.id + "/" + realVersion + "/metal-amd64.raw":                      http.StatusNotFound,
		"/image/" + rf.id + "/" + realVersion + "/kernel-arm64":                         http.StatusNotFound,
		"/image/" + strings.Repeat("0", 64) + "/" + realVersion + "/kernel-amd64":       http.StatusNotFound,
		"/image/" + strings.Repeat("0", 64) + "/" + realVersion + "/initramfs-amd64.xz": http.StatusNotFound,
	} {
		status, body := get(t, rf.srv.URL+path)
		assert.Equal(t, want, status, "%s: %s", path, body)
	}
}

// TestRealTalosUnknownExtension: a schematic naming an extension the factory does not
// have gets no initramfs.
func TestRealTalosUnknownExtension(t *testing.T) {
	t.Parallel()

	rf := newRealFactory(t)

	c, err := client.New(rf.srv.URL)
	require.NoError(t, err)

	var sc schematic.Schematic

	sc.Customization.SystemExtensions.OfficialExtensions = []string{"siderolabs/intel-ucode"}

	id, _, err := c.SchematicCreate(t.Context(), sc)
	require.NoError(t, err)

	status, body := get(t, rf.srv.URL+"/image/"+id+"/"+realVersion+"/initramfs-amd64.xz")
	assert.GreaterOrEqual(t, status, 400)
	assert.Contains(t, string(body), "siderolabs/intel-ucode")
}

// readExtensionLayer reads an appended extension layer: extensions.yaml and the names in
// the archive.
func readExtensionLayer(t *testing.T, data []byte) (extensions.Config, []string) {
	t.Helper()

	recs := initramfstest.Records(t, data, initramfs.Zstd)

	var (
		cfg   extensions.Config
		names []string
	)

	for _, r := range recs {
		names = append(names, r.Name)

		if r.Name == "extensions.yaml" {
			p := filepath.Join(t.TempDir(), "extensions.yaml")
			b, err := io.ReadAll(io.NewSectionReader(r.ReaderAt, 0, int64(r.FileSize)))
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(p, b, 0o644))
			require.NoError(t, cfg.Read(p))
		}
	}

	return cfg, names
}

// TestRealTalosRegistry: the installer images in the factory's registry, as Omni and
// Talos pull them: the base layer, then the assets' layer with the schematic's UKI (its
// kernel, initramfs and command line).
func TestRealTalosRegistry(t *testing.T) {
	t.Parallel()

	if _, err := exec.LookPath("mksquashfs"); err != nil {
		t.Skipf("mksquashfs is missing (make setup installs squashfs-tools): %v", err)
	}

	rf := newRealFactory(t)
	u, err := url.Parse(rf.srv.URL)
	require.NoError(t, err)

	host := u.Host
	baseLayer, err := os.ReadFile(filepath.Join(rf.talos, "installer-base.tar"))
	require.NoError(t, err)

	baseSum := sha256.Sum256(baseLayer)

	cmdline, err := labfactory.TalosCmdline(realVersion, "metal", "amd64", rf.extra)
	require.NoError(t, err)

	plainCmdline, err := labfactory.TalosCmdline(realVersion, "metal", "amd64", nil)
	require.NoError(t, err)

	_, schematicInitrd := get(t, rf.srv.URL+"/image/"+rf.id+"/"+realVersion+"/initramfs-amd64.xz")

	for _, tc := range []struct {
		name, ref, cmdline string
		initrd             []byte
	}{
		{"the schematic's installer", host + "/metal-installer/" + rf.id + ":" + realVersion, cmdline, schematicInitrd},
		{"Talos' own installer", host + "/siderolabs/installer:" + realVersion, plainCmdline, []byte("real Talos initramfs")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ref, err := name.ParseReference(tc.ref, name.Insecure)
			require.NoError(t, err)

			img, err := remote.Image(ref, remote.WithContext(t.Context()))
			require.NoError(t, err)

			layers, err := img.Layers()
			require.NoError(t, err)
			require.Len(t, layers, 2)

			d, err := layers[0].Digest()
			require.NoError(t, err)
			assert.Equal(t, hex.EncodeToString(baseSum[:]), d.Hex, "the base layer first")

			cfg, err := img.ConfigFile()
			require.NoError(t, err)
			assert.Equal(t, []string{"/usr/bin/installer"}, cfg.Config.Entrypoint)
			assert.Equal(t, "amd64", cfg.Architecture)

			files := layerFiles(t, layers[1])
			require.Contains(t, files, "usr/install/amd64/vmlinuz.efi")

			f, err := pe.NewFile(bytes.NewReader(files["usr/install/amd64/vmlinuz.efi"]))
			require.NoError(t, err)

			sections := map[string][]byte{}

			for _, s := range f.Sections {
				data, err := s.Data()
				require.NoError(t, err)

				sections[s.Name] = data[:min(len(data), int(s.VirtualSize))]
			}

			assert.Equal(t, "MZ real Talos kernel", string(sections[".linux"]))
			assert.Equal(t, tc.cmdline, string(sections[".cmdline"]))
			assert.True(t, bytes.Equal(tc.initrd, sections[".initrd"]), ".initrd is the schematic's initramfs")
			assert.Contains(t, string(sections[".osrel"]), "VERSION_ID="+realVersion)

			// Pulled again: the same image.
			again, err := remote.Image(ref, remote.WithContext(t.Context()))
			require.NoError(t, err)

			d1, err := img.Digest()
			require.NoError(t, err)

			d2, err := again.Digest()
			require.NoError(t, err)
			assert.Equal(t, d1, d2)
		})
	}

	// An unregistered schematic, another version: no image, 404 on the manifest.
	for _, ref := range []string{
		host + "/metal-installer/" + strings.Repeat("0", 64) + ":" + realVersion,
		host + "/metal-installer/" + rf.id + ":v1.9.0",
		host + "/siderolabs/installer:v1.12.0",
	} {
		r, err := name.ParseReference(ref, name.Insecure)
		require.NoError(t, err)

		_, err = remote.Image(r, remote.WithContext(t.Context()))

		var terr *transport.Error
		if assert.True(t, errors.As(err, &terr), "%s: %v", ref, err) {
			assert.Equal(t, http.StatusNotFound, terr.StatusCode, ref)
		}

		repo, tag := r.Context().RepositoryStr(), r.Identifier()
		status, body := get(t, rf.srv.URL+"/v2/"+repo+"/manifests/"+tag)
		assert.Equal(t, http.StatusNotFound, status, "%s: %s", ref, body)
	}

	// The registry is read-only from outside: no uploads, no blob pushed whatever its size.
	big := bytes.Repeat([]byte{'x'}, 2<<20)
	bigSum := sha256.Sum256(big)

	for _, req := range []struct{ method, path string }{
		{http.MethodPost, "/v2/metal-installer/" + rf.id + "/blobs/uploads/"},
		{http.MethodPut, "/v2/metal-installer/" + rf.id + "/blobs/uploads/1?digest=sha256:" + hex.EncodeToString(bigSum[:])},
		{http.MethodPut, "/v2/metal-installer/" + rf.id + "/manifests/" + realVersion},
	} {
		r, err := http.NewRequestWithContext(t.Context(), req.method, rf.srv.URL+req.path, bytes.NewReader(big))
		require.NoError(t, err)

		resp, err := http.DefaultClient.Do(r)
		require.NoError(t, err)
		resp.Body.Close()
		assert.GreaterOrEqual(t, resp.StatusCode, 400, "%s %s", req.method, req.path)
	}

	// Kubelet's tags are still the stand-in's Kubernetes versions; the installer's the
	// Talos versions.
	status, body := get(t, rf.srv.URL+"/v2/siderolabs/kubelet/tags/list")
	assert.Equal(t, http.StatusOK, status)
	assert.JSONEq(t, `{"name":"siderolabs/kubelet","tags":["v1.31.4","v1.32.0"]}`, string(body))

	status, body = get(t, rf.srv.URL+"/v2/siderolabs/installer/tags/list")
	assert.Equal(t, http.StatusOK, status)
	assert.JSONEq(t, `{"name":"siderolabs/installer","tags":["v1.9.0","`+realVersion+`"]}`, string(body))
}

// layerFiles are a layer's regular files by name.
func layerFiles(t *testing.T, l v1.Layer) map[string][]byte {
	t.Helper()

	rc, err := l.Uncompressed()
	require.NoError(t, err)

	defer rc.Close()

	files := map[string][]byte{}
	tr := tar.NewReader(rc)

	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}

		require.NoError(t, err)

		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			require.NoError(t, err)

			files[h.Name] = b
		}
	}
}

// TestRealTalosConcurrent: machines asking at once for one schematic's initramfs and
// installer all get the same bytes.
func TestRealTalosConcurrent(t *testing.T) {
	t.Parallel()

	if _, err := exec.LookPath("mksquashfs"); err != nil {
		t.Skipf("mksquashfs is missing (make setup installs squashfs-tools): %v", err)
	}

	rf := newRealFactory(t)
	u, err := url.Parse(rf.srv.URL)
	require.NoError(t, err)

	ref, err := name.ParseReference(u.Host+"/metal-installer/"+rf.id+":"+realVersion, name.Insecure)
	require.NoError(t, err)

	const n = 4

	var (
		wg               sync.WaitGroup
		digests          [n]v1.Hash
		initrds          [n][]byte
		imgErrs, getErrs [n]error
		statuses         [n]int
	)

	for i := range n {
		wg.Go(func() {
			img, err := remote.Image(ref, remote.WithContext(t.Context()))
			if err == nil {
				digests[i], err = img.Digest()
			}

			imgErrs[i] = err

			resp, err := http.Get(rf.srv.URL + "/image/" + rf.id + "/" + realVersion + "/initramfs-amd64.xz")
			if err != nil {
				getErrs[i] = err

				return
			}

			defer resp.Body.Close()

			statuses[i] = resp.StatusCode
			initrds[i], getErrs[i] = io.ReadAll(resp.Body)
		})
	}

	wg.Wait()

	for i := range n {
		require.NoError(t, imgErrs[i])
		require.NoError(t, getErrs[i])
		assert.Equal(t, http.StatusOK, statuses[i])
		assert.Equal(t, digests[0], digests[i])
		assert.True(t, bytes.Equal(initrds[0], initrds[i]))
	}
}

// TestRealTalosTagsList: anyone on the provisioning network may list an installer's tags;
// a page size that is not a count is refused, never a panic of the registry (which sliced
// its tags by a negative n).
func TestRealTalosTagsList(t *testing.T) {
	t.Parallel()

	if _, err := exec.LookPath("mksquashfs"); err != nil {
		t.Skipf("mksquashfs is missing (make setup installs squashfs-tools): %v", err)
	}

	rf := newRealFactory(t)

	// The schematic's installer pushed, so that its repository has tags.
	status, body := get(t, rf.srv.URL+"/v2/metal-installer/"+rf.id+"/manifests/"+realVersion)
	require.Equal(t, http.StatusOK, status, "%s", body)

	for _, tc := range []struct {
		path, query string
		status      int
		tags        string
	}{
		{"tags/list", "", http.StatusOK, `["` + realVersion + `"]`},
		{"tags/list", "?n=1", http.StatusOK, `["` + realVersion + `"]`},
		{"tags/list", "?n=5", http.StatusOK, `["` + realVersion + `"]`},
		{"tags/list", "?n=0", http.StatusOK, `[]`},
		{"tags/list", "?n=-1", http.StatusBadRequest, ""},
		{"tags/list", "?n=-9223372036854775808", http.StatusBadRequest, ""},
		{"tags/list", "?n=x", http.StatusBadRequest, ""},
		{"tags/list", "?n=1&n=-1", http.StatusOK, `["` + realVersion + `"]`},
		// The registry takes any .../tags/<x> for a tag list.
		{"tags/x", "?n=1", http.StatusOK, `["` + realVersion + `"]`},
		{"tags/x", "?n=-1", http.StatusBadRequest, ""},
	} {
		t.Run(tc.path+tc.query, func(t *testing.T) {
			rec := httptest.NewRecorder()
			rf.f.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), http.MethodGet,
				"/v2/metal-installer/"+rf.id+"/"+tc.path+tc.query, nil))

			assert.Equal(t, tc.status, rec.Code, rec.Body.String())

			if tc.tags != "" {
				assert.JSONEq(t, `{"name":"metal-installer/`+rf.id+`","tags":`+tc.tags+`}`, rec.Body.String())
			}
		})
	}
}
