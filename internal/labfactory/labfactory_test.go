package labfactory_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/siderolabs/image-factory/pkg/client"
	"github.com/siderolabs/image-factory/pkg/schematic"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/internal/labfactory"
)

// TestWithFactoryClient: the Image Factory's own client registers schematics with it.
func TestWithFactoryClient(t *testing.T) {
	t.Parallel()

	f := labfactory.New()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)

	c, err := client.New(srv.URL)
	require.NoError(t, err)

	var sc schematic.Schematic

	sc.Customization.SystemExtensions.OfficialExtensions = []string{"siderolabs/intel-ucode"}

	id, _, err := c.SchematicCreate(t.Context(), sc)
	require.NoError(t, err)

	want, err := sc.ID()
	require.NoError(t, err)
	assert.Equal(t, want, id)
	assert.Equal(t, []string{id}, f.Registered())

	doc, ok := f.Schematic(id)
	assert.True(t, ok)
	assert.Contains(t, string(doc), "siderolabs/intel-ucode")

	resp, err := http.Post(srv.URL+"/schematics", "application/yaml", strings.NewReader("customization: [not a map"))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
}

// TestPXEScript: a schematic registered with the factory's client boots, through the PXE
// script, exactly that schematic and version with its extra kernel arguments.
func TestPXEScript(t *testing.T) {
	t.Parallel()

	assets := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(assets, "vmlinuz-amd64"), []byte("KERNEL"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(assets, "initramfs-amd64.zst"), []byte("INITRAMFS"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(assets, "metal-amd64.raw"), []byte("DISK"), 0o644))

	// An arm64 stand-in's files beside them, under the imager's names.
	for name, content := range map[string]string{"vmlinuz-arm64": "ARM64-KERNEL", "initramfs-arm64.zst": "ARM64-INITRAMFS", "metal-arm64.raw": "ARM64-DISK"} {
		require.NoError(t, os.WriteFile(filepath.Join(assets, name), []byte(content), 0o644))
	}

	f := labfactory.New(labfactory.WithAssets(assets))
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)

	c, err := client.New(srv.URL)
	require.NoError(t, err)

	var sc schematic.Schematic

	sc.Customization.ExtraKernelArgs = []string{"console=ttyS1,115200", "talos.dashboard.disabled=1"}

	id, _, err := c.SchematicCreate(t.Context(), sc)
	require.NoError(t, err)

	doc, ok := f.Schematic(id)
	require.True(t, ok)

	image := srv.URL + "/image/" + id + "/v1.9.0/"
	cmdline := "talos.platform=metal console=ttyS0,115200n8 console=tty0 no_timer_check " +
		"anvil.lab.schematic=" + id + " anvil.lab.version=v1.9.0 anvil.lab.factory=" + srv.URL + " " +
		"console=ttyS1,115200 talos.dashboard.disabled=1"
	want := "#!ipxe\nimgfree\n" +
		"kernel " + image + "kernel-amd64 initrd=initramfs-amd64.xz " + cmdline + "\n" +
		"initrd " + image + "initramfs-amd64.xz\nboot\n"

	for _, tc := range []struct {
		name, path string
		status     int
		body       string
	}{
		{"script", "/pxe/" + id + "/v1.9.0/metal-amd64", http.StatusOK, want},
		{"kernel", "/image/" + id + "/v1.9.0/kernel-amd64", http.StatusOK, "KERNEL"},
		{"initramfs", "/image/" + id + "/v1.9.0/initramfs-amd64.xz", http.StatusOK, "INITRAMFS"},
		{"disk image", "/image/" + id + "/v1.9.0/metal-amd64.raw", http.StatusOK, "DISK"},
		// The PXE script's kernel line without initrd=, as the factory's cmdline is.
		{"cmdline", "/image/" + id + "/v1.9.0/cmdline-metal-amd64", http.StatusOK, cmdline},
		{"arm64 kernel", "/image/" + id + "/v1.9.0/kernel-arm64", http.StatusOK, "ARM64-KERNEL"},
		{"arm64 initramfs", "/image/" + id + "/v1.9.0/initramfs-arm64.xz", http.StatusOK, "ARM64-INITRAMFS"},
		{"arm64 disk", "/image/" + id + "/v1.9.0/" + labfactory.DiskImageFor("arm64"), http.StatusOK, "ARM64-DISK"},
		{"arm64 cmdline", "/image/" + id + "/v1.9.0/cmdline-metal-arm64", http.StatusOK, strings.Replace(cmdline, labfactory.BaseCmdline, labfactory.BaseCmdlineARM64, 1)}, // its own serial console
		{"cmdline of an unknown arch", "/image/" + id + "/v1.9.0/cmdline-metal-riscv", http.StatusNotFound, ""},
		{"cmdline of an unknown schematic", "/image/" + strings.Repeat("0", 64) + "/v1.9.0/cmdline-metal-amd64", http.StatusNotFound, ""},
		{"schematic document", "/schematics/" + id, http.StatusOK, string(doc)},
		{"unknown schematic document", "/schematics/" + strings.Repeat("0", 64), http.StatusNotFound, ""},
		{"unknown schematic", "/pxe/" + strings.Repeat("0", 64) + "/v1.9.0/metal-amd64", http.StatusNotFound, ""},
		{"unknown schematic image", "/image/" + strings.Repeat("0", 64) + "/v1.9.0/kernel-amd64", http.StatusNotFound, ""},
		{"unknown file", "/image/" + id + "/v1.9.0/metal-amd64.iso", http.StatusNotFound, ""},
		{"no arch", "/pxe/" + id + "/v1.9.0/metal", http.StatusBadRequest, ""},
		{"bad arch", "/pxe/" + id + "/v1.9.0/metal-riscv", http.StatusBadRequest, ""},
		{"bad version", "/pxe/" + id + "/1.9/metal-amd64", http.StatusBadRequest, ""},
		{"too short", "/pxe/" + id + "/v1.9.0", http.StatusBadRequest, ""},
		{"too long", "/pxe/" + id + "/v1.9.0/metal-amd64/x", http.StatusBadRequest, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := http.Get(srv.URL + tc.path)
			require.NoError(t, err)

			defer resp.Body.Close()

			body, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			assert.Equal(t, tc.status, resp.StatusCode, "%s", body)

			if tc.body != "" {
				assert.Equal(t, tc.body, string(body))
			}
		})
	}
}

// TestNoAssets: without assets the images are not found, and the PXE script still renders.
func TestNoAssets(t *testing.T) {
	t.Parallel()

	f := labfactory.New(labfactory.WithBaseURL("http://factory.example/"))
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)

	c, err := client.New(srv.URL)
	require.NoError(t, err)

	id, _, err := c.SchematicCreate(t.Context(), schematic.Schematic{})
	require.NoError(t, err)

	for path, status := range map[string]int{
		"/pxe/" + id + "/v1.10.0-alpha.1/metal-arm64": http.StatusOK,
		"/image/" + id + "/v1.9.0/kernel-amd64":       http.StatusNotFound,
		"/schematics":                                 http.StatusNotFound,
	} {
		resp, err := http.Get(srv.URL + path)
		require.NoError(t, err)

		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, status, resp.StatusCode, path)

		if status == http.StatusOK {
			assert.Contains(t, string(body), "kernel http://factory.example/image/"+id+"/v1.10.0-alpha.1/kernel-arm64 initrd=initramfs-arm64.xz ")
		}
	}
}

// TestDownloads: each completed GET of an /image/ file counts for its path; HEADs,
// failures and other endpoints do not.
func TestDownloads(t *testing.T) {
	t.Parallel()

	assets := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(assets, "kernel-amd64"), []byte("KERNEL"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(assets, "initramfs-amd64.xz"), []byte("INITRAMFS"), 0o644))

	f := labfactory.New(labfactory.WithAssets(assets))
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)

	c, err := client.New(srv.URL)
	require.NoError(t, err)

	id, _, err := c.SchematicCreate(t.Context(), schematic.Schematic{})
	require.NoError(t, err)

	kernel := "/image/" + id + "/v1.9.0/kernel-amd64"
	initramfs := "/image/" + id + "/v1.9.0/initramfs-amd64.xz"
	cmdline := "/image/" + id + "/v1.9.0/cmdline-metal-amd64"
	missing := "/image/" + id + "/v1.9.0/metal-amd64.iso"

	for _, req := range []struct{ method, path string }{
		{http.MethodGet, kernel},
		{http.MethodGet, kernel},
		{http.MethodHead, kernel},
		{http.MethodGet, initramfs},
		{http.MethodHead, cmdline},
		{http.MethodGet, cmdline},
		{http.MethodGet, missing},
		{http.MethodGet, "/pxe/" + id + "/v1.9.0/metal-amd64"},
	} {
		r, err := http.NewRequestWithContext(t.Context(), req.method, srv.URL+req.path, nil)
		require.NoError(t, err)

		resp, err := http.DefaultClient.Do(r)
		require.NoError(t, err)

		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}

	for path, want := range map[string]int{
		kernel:                               2,
		initramfs:                            1,
		cmdline:                              1,
		missing:                              0,
		"/pxe/" + id + "/v1.9.0/metal-amd64": 0,
		"/image/" + id + "/v1.9.0/initramfs-arm64.xz": 0,
	} {
		assert.Equal(t, want, f.Downloads(path), path)
	}
}
