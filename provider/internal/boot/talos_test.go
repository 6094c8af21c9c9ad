package boot_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

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

// TestTalosFromCache: twenty machines allocated to one schematic asking at once — half
// for their iPXE script, half for their kexec target — cost one factory download per
// asset; the script and the kexec boot the same files with the factory's cmdline, then
// the boot's own arguments for the machine.
func TestTalosFromCache(t *testing.T) {
	t.Parallel()

	f := newCachedFactory(t)
	s, factory, srv, cache := f.scripts, f.factory, f.srv, f.scripts.Cache

	sc, err := s.Schematic([]string{"siderolabs/intel-ucode"}, nil)
	require.NoError(t, err)

	id, _, err := f.client.SchematicCreate(t.Context(), sc)
	require.NoError(t, err)

	alloc := &resources.Allocation{ID: "a1", SchematicID: id, TalosVersion: "v1.12.0"}

	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		scripts = map[string]string{}
		targets = map[string]string{}
	)

	for i := range 20 {
		machine := "4c4c4544-0000-1000-8000-0000000000" + string(rune('a'+i/10)) + string(rune('0'+i%10))

		wg.Go(func() {
			if i%2 == 0 {
				req := boot.Request{MachineID: machine, Arch: "amd64"}
				got := s.Render(t.Context(), req, lifecycle.BootDecision{Boot: lifecycle.BootTalos, Allocation: alloc}, token.Claims{})

				mu.Lock()
				scripts[machine] = got.Body
				mu.Unlock()

				return
			}

			k, err := s.KexecTarget(t.Context(), machine, "amd64", alloc)
			if !assert.NoError(t, err) {
				return
			}

			mu.Lock()
			targets[machine] = k.GetCmdline()
			mu.Unlock()

			assert.Equal(t, "http://10.77.0.1:50042/assets/talos/"+id+"/v1.12.0/kernel-amd64", k.GetKernelUrl())
			assert.Equal(t, "http://10.77.0.1:50042/assets/talos/"+id+"/v1.12.0/initramfs-amd64.xz", k.GetInitramfsUrl())
			assert.Len(t, k.GetKernelSha256(), 64)
			assert.Len(t, k.GetInitramfsSha256(), 64)
		})
	}

	wg.Wait()

	for _, file := range []string{"kernel-amd64", "initramfs-amd64.xz", "cmdline-metal-amd64"} {
		assert.Equal(t, 1, factory.Downloads("/image/"+id+"/v1.12.0/"+file), "%s: one download for twenty machines", file)
	}

	require.Len(t, scripts, 10)
	require.Len(t, targets, 10)

	for machine, script := range scripts {
		assert.True(t, strings.HasPrefix(script, "#!ipxe\nimgfree\nkernel http://10.77.0.1:50042/assets/talos/"+id+"/v1.12.0/kernel-amd64 initrd=initramfs-amd64.xz talos.platform=metal "), script)
		assert.True(t, strings.HasSuffix(script, "\ninitrd http://10.77.0.1:50042/assets/talos/"+id+"/v1.12.0/initramfs-amd64.xz\nboot\n"), script)
		assert.NotContains(t, script, "\nset ", "no iPXE settings: the kernel line carries the values")

		_, args := kernelLine(t, script)
		assertBootArgs(t, args, boot.MetadataClaims, machine, "a1", alloc.TalosVersion, true)
	}

	for machine, cmdline := range targets {
		assert.True(t, strings.HasPrefix(cmdline, "talos.platform=metal "), cmdline)
		assertBootArgs(t, strings.Fields(cmdline), boot.KexecMetadataClaims, machine, "a1", alloc.TalosVersion, true)
	}

	// The factory gone, a new cache over the same files boots the same (air-gapped).
	srv.Close()

	s.Cache = cache
	got := s.Render(t.Context(), boot.Request{MachineID: "m", Arch: "amd64"}, lifecycle.BootDecision{Boot: lifecycle.BootTalos, Allocation: alloc}, token.Claims{})
	assert.Contains(t, got.Body, "/assets/talos/"+id+"/v1.12.0/kernel-amd64")

	// An allocation the cache cannot serve: the script says so and retries.
	other := &resources.Allocation{ID: "a2", SchematicID: strings.Repeat("0", 64), TalosVersion: "v1.12.0"}
	got = s.Render(t.Context(), boot.Request{MachineID: "m", Arch: "amd64"}, lifecycle.BootDecision{Boot: lifecycle.BootTalos, Allocation: other}, token.Claims{})
	assert.Equal(t, http.StatusOK, got.Status)
	assert.Contains(t, got.Body, "the Talos boot assets are not ready")
	assert.Contains(t, got.Body, "chain http://10.77.0.1:50042/ipxe/start.ipxe")
}

// TestTalosBootRegistersTheSchematic: right after an allocation the factory may not know
// its schematic yet (the schematic controller registers it in the background); the boot
// registers it itself and fetches again, rather than failing the kexec or making iPXE
// wait for the next try.
func TestTalosBootRegistersTheSchematic(t *testing.T) {
	t.Parallel()

	f := newCachedFactory(t)
	s, c := f.scripts, f.client

	sc, err := s.Schematic(nil, nil)
	require.NoError(t, err)

	id, err := sc.ID()
	require.NoError(t, err)

	alloc := &resources.Allocation{ID: "a1", SchematicID: id, TalosVersion: "v1.12.0"}

	// Without a way to register, the factory's 404 is the answer.
	_, err = s.KexecTarget(t.Context(), "m1", "amd64", alloc)
	require.ErrorContains(t, err, "404")

	var registered int

	s.RegisterSchematic = func(ctx context.Context, _ string, a *resources.Allocation) error {
		registered++

		got, _, err := c.SchematicCreate(ctx, sc)
		assert.Equal(t, a.SchematicID, got)

		return err
	}

	k, err := s.KexecTarget(t.Context(), "m1", "amd64", alloc)
	require.NoError(t, err)
	assert.Equal(t, 1, registered)
	assert.Equal(t, "http://10.77.0.1:50042/assets/talos/"+id+"/v1.12.0/kernel-amd64", k.GetKernelUrl())
}

// TestTalosKernelLineBounded: a schematic whose kernel arguments leave no room for the
// boot's own (the metadata URL last) is not booted with a kernel line Linux would cut:
// the iPXE script says why and asks again, the kexec target is an error.
func TestTalosKernelLineBounded(t *testing.T) {
	t.Parallel()

	f := newCachedFactory(t)
	s, c := f.scripts, f.client

	for name, tc := range map[string]struct {
		pad  int
		fits bool
	}{
		"a site's console":          {16, true},
		"1900 bytes of kernel args": {1900, false},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()

			sc, err := s.Schematic(nil, []string{"anvil.pad=" + strings.Repeat("x", tc.pad)})
			require.NoError(t, err)

			id, _, err := c.SchematicCreate(t.Context(), sc)
			require.NoError(t, err)

			alloc := &resources.Allocation{ID: "a1", SchematicID: id, TalosVersion: "v1.12.0"}

			got := s.Render(t.Context(), boot.Request{MachineID: "m1", Arch: "amd64"}, lifecycle.BootDecision{Boot: lifecycle.BootTalos, Allocation: alloc}, token.Claims{})
			_, kexecErr := s.KexecTarget(t.Context(), "m1", "amd64", alloc)

			if tc.fits {
				assert.True(t, got.Handoff, got.Body)
				require.NoError(t, kexecErr)

				return
			}

			assert.False(t, got.Handoff, "no Talos boot with a cut kernel line:\n%s", got.Body)
			assert.Contains(t, got.Body, "past Linux's 2047")
			assert.NotContains(t, got.Body, "token=")
			require.ErrorContains(t, kexecErr, "past Linux's 2047")
		})
	}
}

// cachedFactory is a lab factory that serves an amd64 kernel and initramfs, its client,
// and the tests' Scripts booting Talos from a cache of it.
type cachedFactory struct {
	factory *labfactory.Factory
	srv     *httptest.Server
	client  *client.Client
	scripts *boot.Scripts
}

func newCachedFactory(t *testing.T) cachedFactory {
	t.Helper()

	assets := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(assets, "kernel-amd64"), []byte("KERNEL"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(assets, "initramfs-amd64.xz"), []byte("INITRAMFS"), 0o644))

	f := cachedFactory{factory: labfactory.New(labfactory.WithAssets(assets)), scripts: testScripts(t, true)}
	f.srv = httptest.NewServer(f.factory)
	t.Cleanup(f.srv.Close)

	c, err := client.New(f.srv.URL)
	require.NoError(t, err)

	f.client = c

	cache, err := imagecache.New(imagecache.Options{Dir: t.TempDir(), FactoryBaseURL: f.srv.URL, Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, cache.Close()) })

	f.scripts.Cache = cache

	return f
}
