package boot_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/image-factory/pkg/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/anvil-metal/anvil/internal/labfactory"
	"github.com/anvil-metal/anvil/internal/token"
	"github.com/anvil-metal/anvil/provider/internal/boot"
	"github.com/anvil-metal/anvil/provider/internal/imagecache"
	"github.com/anvil-metal/anvil/provider/internal/lifecycle"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// writeARM64Assets adds an arm64 asset set to the scripts' directory, with a UKI stub or
// without, and reloads the assets.
func writeARM64Assets(t *testing.T, s *boot.Scripts, stub bool) {
	t.Helper()

	files := map[string]string{
		"vmlinuz-arm64":       "kernel",
		"initramfs-arm64.zst": "initramfs",
		"cmdline-arm64":       "console=ttyAMA0,115200n8\n",
	}
	if stub {
		files["uki-stub-arm64.efi"] = "MZ stub"
	}

	for name, content := range files {
		require.NoError(t, os.WriteFile(filepath.Join(s.Assets.Dir, name), []byte(content), 0o644))
	}

	assets, err := boot.LoadAgentAssets(s.Assets.Dir)
	require.NoError(t, err)

	s.Assets = assets
}

var arm64Req = boot.Request{MachineID: "m1", UUID: "m1", MAC: "52:54:00:00:00:01", Arch: "arm64", Firmware: "uefi"}

// TestRenderUKI walks the boot decision's outcomes for a machine that boots a UKI.
func TestRenderUKI(t *testing.T) {
	t.Parallel()

	alloc := &resources.Allocation{ID: "a1", TalosVersion: "v1.9.0", SchematicID: "s"}

	for _, tc := range []struct {
		name       string
		stub       bool
		join       func() ([]string, bool)
		decision   lifecycle.BootDecision
		wantStatus int
		wantServed lifecycle.Boot
		wantMsg    string
	}{
		{name: "agent", stub: true, decision: lifecycle.BootDecision{Boot: lifecycle.BootAgent}, wantStatus: http.StatusOK, wantServed: lifecycle.BootAgent},
		{name: "talos without a cache goes through the agent", stub: true, decision: lifecycle.BootDecision{Boot: lifecycle.BootTalos, Allocation: alloc}, wantStatus: http.StatusOK, wantServed: lifecycle.BootAgent},
		{name: "disk is a 404", stub: true, decision: lifecycle.BootDecision{Boot: lifecycle.BootDisk}, wantStatus: http.StatusNotFound, wantServed: lifecycle.BootDisk},
		{name: "no stub", decision: lifecycle.BootDecision{Boot: lifecycle.BootAgent}, wantStatus: http.StatusServiceUnavailable, wantMsg: "no UKI stub for arm64"},
		{name: "no join config yet", stub: true, join: func() ([]string, bool) { return nil, false }, decision: lifecycle.BootDecision{Boot: lifecycle.BootAgent}, wantStatus: http.StatusServiceUnavailable, wantMsg: "Omni's join config"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			s := testScripts(t, true)
			s.JoinArgs = tc.join
			s.AgentKernelArgs = []string{"no_timer_check"}
			writeARM64Assets(t, s, tc.stub)

			issued := time.Unix(1700000000, 7)
			got := s.RenderUKI(t.Context(), arm64Req, tc.decision, token.Claims{Issued: issued})

			require.Equal(t, tc.wantStatus, got.Status)
			assert.Equal(t, tc.wantServed, got.Served)
			assert.Contains(t, got.Message, tc.wantMsg)

			if tc.wantStatus != http.StatusOK {
				assert.Empty(t, got.Cmdline)
				assert.True(t, got.AgentToken.Issued.IsZero(), "no token for an image not served")

				return
			}

			assert.Equal(t, []byte("MZ stub"), got.Stub, "the stub, read at load")
			assert.Equal(t, filepath.Join(s.Assets.Dir, "vmlinuz-arm64"), got.Kernel)
			assert.Equal(t, filepath.Join(s.Assets.Dir, "initramfs-arm64.zst"), got.Initramfs)

			// The same arguments as the iPXE agent script's kernel line, with no initrd=
			// (the stub hands the kernel its .initrd).
			assert.True(t, strings.HasPrefix(got.Cmdline, "console=ttyAMA0,115200n8 no_timer_check anvil.provider=10.77.0.1:50042 anvil.ca=abcd anvil.machine=m1 anvil.token=v1."), got.Cmdline)
			assert.NotContains(t, got.Cmdline, "initrd=")

			tok := got.Cmdline[strings.Index(got.Cmdline, "anvil.token=")+len("anvil.token="):]
			claims, err := token.Verify(testKey, tok)
			require.NoError(t, err)
			assert.Equal(t, token.KindAgent, claims.Kind)
			assert.Equal(t, "m1", claims.MachineID)
			assert.Equal(t, claims, got.AgentToken)
		})
	}
}

// TestRenderTalosUKI: with a cache, an arm64 machine allocated to Talos gets a UKI of the
// cached arm64 kernel and initramfs, with the cmdline a kexec would get; an allocation
// the cache cannot serve is a 503, tried again on the next boot.
func TestRenderTalosUKI(t *testing.T) {
	t.Parallel()

	assets := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(assets, "vmlinuz-arm64"), []byte("ARM64-TALOS-KERNEL"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(assets, "initramfs-arm64.zst"), []byte("ARM64-TALOS-INITRAMFS"), 0o644))

	srv := httptest.NewServer(labfactory.New(labfactory.WithAssets(assets)))
	t.Cleanup(srv.Close)

	s := testScripts(t, true)
	writeARM64Assets(t, s, true)

	sc, err := s.Schematic(nil, nil)
	require.NoError(t, err)

	c, err := client.New(srv.URL)
	require.NoError(t, err)

	id, _, err := c.SchematicCreate(t.Context(), sc)
	require.NoError(t, err)

	cache, err := imagecache.New(imagecache.Options{Dir: t.TempDir(), FactoryBaseURL: srv.URL, Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, cache.Close()) })

	s.Cache = cache
	alloc := &resources.Allocation{ID: "a1", SchematicID: id, TalosVersion: "v1.12.0"}

	got := s.RenderUKI(t.Context(), arm64Req, lifecycle.BootDecision{Boot: lifecycle.BootTalos, Allocation: alloc}, token.Claims{Issued: time.Now()})
	require.Equal(t, http.StatusOK, got.Status, got.Message)
	assert.Equal(t, lifecycle.BootTalos, got.Served)
	assert.True(t, got.AgentToken.Issued.IsZero(), "Talos carries no agent token")

	for path, want := range map[string]string{got.Kernel: "ARM64-TALOS-KERNEL", got.Initramfs: "ARM64-TALOS-INITRAMFS"} {
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		assert.Equal(t, want, string(b), "the cached file")
	}

	tb, err := s.TalosBoot(t.Context(), "m1", alloc, "arm64")
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(got.Cmdline, tb.Cmdline+" "), "the factory's cmdline, then the boot's arguments: %s", got.Cmdline)
	kexecCmdline, err := s.KexecCmdline(tb, "m1", alloc)
	require.NoError(t, err)
	assert.NotEqual(t, kexecCmdline, got.Cmdline, "a UKI is fetched over plain HTTP: never the kexec kind of token")
	assert.True(t, strings.HasPrefix(got.Cmdline, tb.Cmdline+" "), "the factory's cmdline, then the boot's own arguments: %s", got.Cmdline)
	assert.Contains(t, got.Cmdline, "console=ttyAMA0")
	assertBootArgs(t, strings.Fields(got.Cmdline), boot.MetadataClaims, "m1", "a1", alloc.TalosVersion, true)

	other := &resources.Allocation{ID: "a2", SchematicID: strings.Repeat("0", 64), TalosVersion: "v1.12.0"}
	got = s.RenderUKI(t.Context(), arm64Req, lifecycle.BootDecision{Boot: lifecycle.BootTalos, Allocation: other}, token.Claims{})
	assert.Equal(t, http.StatusServiceUnavailable, got.Status)
	assert.Contains(t, got.Message, "the Talos boot assets are not ready")
}
