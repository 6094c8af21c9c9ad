package httpapi_test

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/siderolabs/siderolink/api/events"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/anvil-metal/anvil/internal/token"
	"github.com/anvil-metal/anvil/provider/internal/boot"
	"github.com/anvil-metal/anvil/provider/internal/controllers"
	"github.com/anvil-metal/anvil/provider/internal/httpapi"
	"github.com/anvil-metal/anvil/provider/internal/lifecycle"
	"github.com/anvil-metal/anvil/provider/internal/machineview"
	"github.com/anvil-metal/anvil/provider/internal/resources"
	"github.com/anvil-metal/anvil/provider/internal/tamper"
	"github.com/anvil-metal/anvil/provider/internal/tamper/tampertest"
	"github.com/anvil-metal/anvil/provider/internal/transitions"
)

const (
	m1 = "4c4c4544-0000-1000-8000-000000000001"
	m2 = "4c4c4544-0000-1000-8000-000000000002"
)

// Schematic IDs the fixture's factory serves a cmdline for (any schematic, any version).
var (
	s1 = strings.Repeat("1", 64)
	s2 = strings.Repeat("2", 64)
)

// factoryCmdline is what the fixture's factory answers for a schematic's cmdline.
const factoryCmdline = "talos.platform=metal console=tty0"

type recorder struct {
	mu      sync.Mutex
	records []string
	// statuses are the machines' statuses as far as config fetches go.
	statuses map[string]*resources.MachineStatusSpec
}

func (r *recorder) UseConfigToken(_ context.Context, machineID, allocationID, path, addr string) (resources.ConfigFetchRecord, bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()

	if r.statuses == nil {
		r.statuses = map[string]*resources.MachineStatusSpec{}
	}

	s := r.statuses[machineID]
	if s == nil {
		s = &resources.MachineStatusSpec{}
		r.statuses[machineID] = s
	}

	allowed := s.UseConfigToken(allocationID, path, addr, time.Now())

	return *s.ConfigFetch, allowed, nil
}

func (r *recorder) RecordInstalled(_ context.Context, machineID, allocationID, source string) error {
	r.mu.Lock()
	defer r.mu.Unlock()

	r.records = append(r.records, machineID+"/"+allocationID+"/"+source)

	return nil
}

func (r *recorder) RecordTalosSeen(_ context.Context, machineID, allocationID string) error {
	r.mu.Lock()
	defer r.mu.Unlock()

	r.records = append(r.records, machineID+"/"+allocationID+"/seen")

	return nil
}

type fixture struct {
	store   *resources.Store
	server  *httpapi.Server
	scripts *boot.Scripts
	obs     chan controllers.PXEObservation
	rec     *recorder
	view    *machineview.View
	// registry holds the server's metrics, the security events among them.
	registry *prometheus.Registry
}

// held is why the machine is held after a security event, as its intent says.
func (f *fixture) held(t *testing.T, id string) string {
	t.Helper()

	in, err := safe.StateGetByID[*resources.MachineIntent](t.Context(), f.store, id)
	require.NoError(t, err)

	return in.TypedSpec().Held
}

// newFixture builds a server on a view that is ready; tweaks set the view's fields before
// it runs (Current).
func newFixture(t testing.TB, tweaks ...func(*machineview.View)) *fixture {
	t.Helper()

	store, err := resources.Open(t.Context(), t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { store.Close() })

	assetsDir := t.TempDir()
	for name, content := range map[string]string{"vmlinuz-amd64": "KERNEL", "initramfs-amd64.xz": "INITRAMFS"} {
		require.NoError(t, os.WriteFile(filepath.Join(assetsDir, name), []byte(content), 0o644))
	}

	assets, err := boot.LoadAgentAssets(assetsDir)
	require.NoError(t, err)

	// The Image Factory's PXE endpoint, for the cmdline of a Talos boot without a cache.
	factory := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.Contains(r.URL.Path, "/cmdline-metal-") {
			http.NotFound(w, r)

			return
		}

		_, _ = io.WriteString(w, factoryCmdline)
	}))
	t.Cleanup(factory.Close)

	f := &fixture{
		store: store,
		scripts: &boot.Scripts{
			BaseURL: "http://10.77.0.1:50042", APIEndpoint: "10.77.0.1:50042", FactoryPXEBaseURL: factory.URL,
			Platform: "metal", DiskMethod: boot.DiskIPXEExit, Assets: assets,
			// The tests sign and verify with the key, apart from the Signer.
			Tokens: token.NewSigner(store.Keys().TokenKey()), TokenKey: store.Keys().TokenKey(),
		},
		obs: make(chan controllers.PXEObservation, 16),
		rec: &recorder{},
	}

	f.view = machineview.New()
	for _, tweak := range tweaks {
		tweak(f.view)
	}

	ctx, cancel := context.WithCancel(context.Background())
	viewDone := make(chan error, 1)

	go func() { viewDone <- f.view.Run(ctx, store) }()

	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-viewDone)
	})

	<-f.view.Ready()

	bootFile := filepath.Join(t.TempDir(), "ipxe.efi")
	require.NoError(t, os.WriteFile(bootFile, []byte("MZ-IPXE"), 0o644))

	f.registry = prometheus.NewRegistry()
	f.server = httpapi.New(httpapi.Options{
		State: store, View: f.view, Scripts: f.scripts, Observations: f.obs, Installs: f.rec,
		Tamper:    tamper.New(transitions.New(store, transitions.Options{}), nil, f.registry, zaptest.NewLogger(t)),
		BootFiles: map[string]string{"ipxe.efi": bootFile, "arm64/ipxe.efi": filepath.Join(assetsDir, "missing.efi")},
		Registry:  f.registry, Logger: zaptest.NewLogger(t),
	})

	return f
}

// machine stores a machine as the controllers would have.
func (f *fixture) machine(t testing.TB, id, address string, decision lifecycle.Boot, intent *resources.MachineIntentSpec, status *resources.MachineStatusSpec) {
	t.Helper()

	ctx := t.Context()
	m := resources.NewMachine(id)
	m.TypedSpec().UUID = id
	m.TypedSpec().LastAddress = address
	m.TypedSpec().LastDecision = string(decision)
	require.NoError(t, f.store.Create(ctx, m))

	if intent != nil {
		in := resources.NewMachineIntent(id)
		*in.TypedSpec() = *intent
		require.NoError(t, f.store.Create(ctx, in))
	}

	if status != nil {
		st := resources.NewMachineStatus(id)
		*st.TypedSpec() = *status
		require.NoError(t, f.store.Create(ctx, st))
	}

	// The boot services read the view, which follows the state by a watch event.
	require.Eventually(t, func() bool {
		e := f.view.Get(id)

		return e != nil && e.Machine != nil && (intent == nil) == (e.Intent == nil) && (status == nil) == (e.Status == nil)
	}, 5*time.Second, time.Millisecond)
}

// configFetched stores that the machine's Talos fetched the allocation's configuration
// from addr, as the status controller does, and waits for the view to know it.
func (f *fixture) configFetched(t testing.TB, id, allocationID, addr string) {
	t.Helper()

	_, err := safe.StateModifyWithResult(t.Context(), f.store, resources.NewMachineStatus(id), func(st *resources.MachineStatus) error {
		st.TypedSpec().ConfigFetch = &resources.ConfigFetchRecord{AllocationID: allocationID, By: addr}

		return nil
	})
	require.NoError(t, err)

	require.Eventually(t, func() bool {
		at, ok := f.view.TalosAt(addr)

		return ok && at.Machine == id && at.Allocation == allocationID
	}, 5*time.Second, time.Millisecond)
}

func (f *fixture) get(t *testing.T, target string) (int, string) {
	t.Helper()

	rec := httptest.NewRecorder()
	f.server.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))

	return rec.Code, rec.Body.String()
}

func bootURL(id string) string {
	return "/ipxe/boot.ipxe?uuid=" + id + "&mac=52-54-00-00-00-01&arch=x86_64&platform=efi"
}

func TestBootScripts(t *testing.T) {
	t.Parallel()

	f := newFixture(t)
	alloc := &resources.Allocation{ID: "a1", TalosVersion: "v1.9.0", SchematicID: s1}

	f.machine(t, m2, "192.0.2.2", lifecycle.BootAgent, &resources.MachineIntentSpec{Acceptance: resources.AcceptanceAccepted, Allocation: alloc}, nil)

	code, body := f.get(t, bootURL(m1))
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, "kernel http://10.77.0.1:50042/assets/agent/vmlinuz-amd64")
	assert.Contains(t, body, "anvil.machine="+m1)

	obs := <-f.obs
	assert.Equal(t, m1, obs.MachineID)
	assert.Equal(t, "52:54:00:00:00:01", obs.MAC)
	assert.Equal(t, "uefi", obs.Firmware)
	assert.Equal(t, "agent", obs.Decision)
	assert.False(t, obs.AgentIssued.IsZero())

	code, body = f.get(t, bootURL(m2))
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, "kernel "+f.scripts.FactoryPXEBaseURL+"/image/"+s1+"/v1.9.0/kernel-amd64 initrd=initramfs-amd64.xz "+factoryCmdline+
		" talos.config=http://10.77.0.1:50042/metadata/"+m2+"?token=")
	assert.Equal(t, "talos", (<-f.obs).Decision)

	code, body = f.get(t, "/ipxe/boot.ipxe?uuid=nope")
	assert.Equal(t, http.StatusBadRequest, code)
	assert.Contains(t, body, "missing mac")

	code, _ = f.get(t, "/ipxe/start.ipxe")
	assert.Equal(t, http.StatusOK, code)

	code, body = f.get(t, "/metrics")
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, `anvil_boot_scripts_total{decision="agent"} 1`)
	assert.Contains(t, body, `anvil_boot_scripts_total{decision="talos"} 1`)
	assert.Contains(t, body, "anvil_boot_script_bad_requests_total 1")
}

func TestAgentAssets(t *testing.T) {
	t.Parallel()

	f := newFixture(t)

	code, body := f.get(t, "/assets/agent/vmlinuz-amd64")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "KERNEL", body)

	code, _ = f.get(t, "/assets/agent/cmdline-amd64")
	assert.Equal(t, http.StatusNotFound, code)

	// Traversal is refused before any handler runs: the path is not clean (cleanpath.go).
	for _, target := range []string{"/assets/agent/..%2fprovider.key", "/assets/agent/%2e%2e"} {
		code, _ = f.get(t, target)
		assert.Equal(t, http.StatusBadRequest, code, target)
	}
}

// UEFI HTTP boot clients get the configured EFI binaries, and nothing else.
func TestBootFiles(t *testing.T) {
	t.Parallel()

	f := newFixture(t)

	for _, tc := range []struct {
		target   string
		wantCode int
		wantBody string
	}{
		{"/boot/ipxe.efi", http.StatusOK, "MZ-IPXE"},
		{"/boot/arm64/ipxe.efi", http.StatusNotFound, ""}, // configured, absent on disk
		{"/boot/undionly.kpxe", http.StatusNotFound, ""},  // not an HTTP boot file
		{"/boot/vmlinuz-amd64", http.StatusNotFound, ""},
		{"/boot/", http.StatusNotFound, ""},
		{"/boot/..%2fprovider.key", http.StatusBadRequest, ""},
	} {
		code, body := f.get(t, tc.target)
		assert.Equal(t, tc.wantCode, code, tc.target)

		if tc.wantBody != "" {
			assert.Equal(t, tc.wantBody, body, tc.target)
		}
	}
}

func TestMetadata(t *testing.T) {
	t.Parallel()

	f := newFixture(t)
	key := f.scripts.TokenKey
	alloc := &resources.Allocation{ID: "a1", TalosVersion: "v1.9.0", Config: "version: v1alpha1\n"}

	f.machine(t, m1, "192.0.2.1", lifecycle.BootTalos, &resources.MachineIntentSpec{Acceptance: resources.AcceptanceAccepted, Allocation: alloc}, nil)
	f.machine(t, m2, "192.0.2.2", lifecycle.BootTalos, &resources.MachineIntentSpec{Acceptance: resources.AcceptanceAccepted,
		Allocation: &resources.Allocation{ID: "a2", TalosVersion: "v1.9.0"}}, nil)

	for _, tc := range []struct {
		name, target string
		code         int
		body         string
	}{
		{"own token", "/metadata/" + m1 + "?token=" + token.Sign(key, boot.MetadataClaims(m1, "a1")), http.StatusOK, "version: v1alpha1\n"},
		{"another machine's token", "/metadata/" + m1 + "?token=" + token.Sign(key, boot.MetadataClaims(m2, "a2")), http.StatusForbidden, "invalid token"},
		{"an earlier allocation's token", "/metadata/" + m1 + "?token=" + token.Sign(key, boot.MetadataClaims(m1, "a0")), http.StatusForbidden, "current allocation"},
		{"an agent token", "/metadata/" + m1 + "?token=" + token.Sign(key, token.Claims{Kind: token.KindAgent, MachineID: m1, Issued: time.Now()}), http.StatusForbidden, "invalid token"},
		{"no token", "/metadata/" + m1, http.StatusForbidden, "invalid token"},
		{"garbage", "/metadata/" + m1 + "?token=" + strings.Repeat("x", 4096), http.StatusForbidden, "invalid token"},
		{"no config", "/metadata/" + m2 + "?token=" + token.Sign(key, boot.MetadataClaims(m2, "a2")), http.StatusNotFound, "no configuration"},
	} {
		code, body := f.get(t, tc.target)
		assert.Equal(t, tc.code, code, tc.name)
		assert.Contains(t, body, tc.body, tc.name)
	}
}

// TestMetadataTokenBoundToFirstFetch: a configuration token serves the address that used
// it first, again if it asks again, and nobody else: a second address (a thief who read
// the boot script, or the machine after a thief) is refused, the machine is held and a
// security event raised, and the configuration is not served even to the first address
// once the machine is held. Finding 1 of issue 28: before, anyone with the token was
// served for as long as the allocation lasted.
func TestMetadataTokenBoundToFirstFetch(t *testing.T) {
	t.Parallel()

	f := newFixture(t)
	f.machine(t, m1, "192.0.2.1", lifecycle.BootTalos, &resources.MachineIntentSpec{Acceptance: resources.AcceptanceAccepted,
		Allocation: &resources.Allocation{ID: "a1", TalosVersion: "v1.9.0", Config: "version: v1alpha1\n"}}, nil)

	target := "/metadata/" + m1 + "?token=" + token.Sign(f.scripts.TokenKey, boot.MetadataClaims(m1, "a1"))
	fetch := func(from string) (int, string) {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, target, nil)
		req.RemoteAddr = from + ":40000"
		f.server.Handler().ServeHTTP(rec, req)

		return rec.Code, rec.Body.String()
	}

	code, body := fetch("192.0.2.1")
	require.Equal(t, http.StatusOK, code)
	assert.Equal(t, "version: v1alpha1\n", body)

	code, _ = fetch("192.0.2.1")
	assert.Equal(t, http.StatusOK, code, "the same Talos asking again")

	code, body = fetch("192.0.2.66")
	assert.Equal(t, http.StatusForbidden, code)
	assert.NotContains(t, body, "v1alpha1")
	assert.Contains(t, f.held(t, m1), "192.0.2.66", "the machine is held, saying who asked")
	assert.Equal(t, 1.0, tampertest.Count(t, f.registry, tamper.ConfigReplay))

	code, _ = fetch("192.0.2.1")
	assert.Equal(t, http.StatusForbidden, code, "not even to the first address once held")

	// Nor is the leaked allocation completed: the held machine's install is not recorded,
	// even from the address that fetched its configuration.
	_, sink := f.serveEventSink(t)
	f.configFetched(t, m1, "a1", "127.0.0.1")

	_, err := sink.Publish(t.Context(), failedSequence(t, "install", installRebooted))
	assert.Equal(t, codes.PermissionDenied, grpcstatus.Code(err))
	assert.Empty(t, f.rec.records)
}

// TestMetadataKexecHandoff: a machine handed over by kexec got the kexec kind of token
// over its agent's channel; once its agent loaded the kexec, a boot script's token for
// it (anyone can fetch the script) is refused, counted as a security event and holds
// nothing, until the handoff has failed or its deadline passed (the machine is then
// booted through its firmware, with a boot script's token), or from the address its
// kexec'd Talos fetched from. A kexec ordered to a session already gone (the machine
// powered off under it) changes nothing: the machine boots by iPXE.
func TestMetadataKexecHandoff(t *testing.T) {
	t.Parallel()

	const (
		machineAddr  = "192.0.2.1"
		strangerAddr = "192.0.2.66"
		config       = "version: v1alpha1\n"
	)

	now := time.Now()
	pending := &resources.HandoffRecord{AllocationID: "a1", OrderedAt: now, LoadedAt: now}
	confirmed := &resources.HandoffRecord{AllocationID: "a1", OrderedAt: now, LoadedAt: now, ConfirmedAt: now}
	fetchedByKexec := &resources.ConfigFetchRecord{AllocationID: "a1", By: machineAddr, At: now, Path: resources.ConfigPathKexec}

	for name, tc := range map[string]struct {
		handoff *resources.HandoffRecord
		fetch   *resources.ConfigFetchRecord
		claims  func(machineID, allocationID string) token.Claims
		from    string
		code    int
		path    string // the path the fetch is recorded with, when served
		events  float64
	}{
		"kexec token, handoff underway": {
			handoff: pending, claims: boot.KexecMetadataClaims, from: machineAddr,
			code: http.StatusOK, path: resources.ConfigPathKexec,
		},
		"boot script's token, handoff underway": {
			handoff: pending, claims: boot.MetadataClaims, from: strangerAddr,
			code: http.StatusForbidden, events: 1,
		},
		"boot script's token, handed over": {
			handoff: confirmed, fetch: fetchedByKexec, claims: boot.MetadataClaims, from: strangerAddr,
			code: http.StatusForbidden, events: 1,
		},
		"boot script's token from the kexec'd Talos' address": {
			handoff: confirmed, fetch: fetchedByKexec, claims: boot.MetadataClaims, from: machineAddr,
			code: http.StatusOK, path: resources.ConfigPathKexec,
		},
		"boot script's token, kexec ordered but never loaded (the session was gone)": {
			handoff: &resources.HandoffRecord{AllocationID: "a1", OrderedAt: now},
			claims:  boot.MetadataClaims, from: machineAddr,
			code: http.StatusOK, path: resources.ConfigPathBootScript,
		},
		"boot script's token, handoff failed": {
			handoff: &resources.HandoffRecord{AllocationID: "a1", OrderedAt: now, LoadedAt: now, Failure: "kexec_load: EPERM"},
			claims:  boot.MetadataClaims, from: machineAddr,
			code: http.StatusOK, path: resources.ConfigPathBootScript,
		},
		"boot script's token, handoff past its deadline": {
			handoff: &resources.HandoffRecord{AllocationID: "a1", OrderedAt: now.Add(-2 * lifecycle.DefaultKexecTimeout), LoadedAt: now.Add(-2 * lifecycle.DefaultKexecTimeout)},
			claims:  boot.MetadataClaims, from: machineAddr,
			code: http.StatusOK, path: resources.ConfigPathBootScript,
		},
		"boot script's token, an earlier allocation's handoff": {
			handoff: &resources.HandoffRecord{AllocationID: "a0", OrderedAt: now, LoadedAt: now},
			claims:  boot.MetadataClaims, from: machineAddr,
			code: http.StatusOK, path: resources.ConfigPathBootScript,
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()

			f := newFixture(t)
			f.machine(t, m1, machineAddr, lifecycle.BootTalos, &resources.MachineIntentSpec{Acceptance: resources.AcceptanceAccepted,
				Allocation: &resources.Allocation{ID: "a1", TalosVersion: "v1.9.0", Config: config}},
				&resources.MachineStatusSpec{Handoff: tc.handoff, ConfigFetch: tc.fetch})

			if tc.fetch != nil {
				f.rec.statuses = map[string]*resources.MachineStatusSpec{m1: {ConfigFetch: new(*tc.fetch)}}
			}

			rec := httptest.NewRecorder()
			req := httptest.NewRequest(http.MethodGet, "/metadata/"+m1+"?token="+token.Sign(f.scripts.TokenKey, tc.claims(m1, "a1")), nil)
			req.RemoteAddr = tc.from + ":40000"
			f.server.Handler().ServeHTTP(rec, req)

			assert.Equal(t, tc.code, rec.Code, rec.Body.String())
			assert.Equal(t, tc.events, tampertest.Count(t, f.registry, tamper.BootScriptToken))
			assert.Empty(t, f.held(t, m1), "a refused boot script's token holds nothing")

			if tc.code != http.StatusOK {
				assert.NotContains(t, rec.Body.String(), "v1alpha1")
				if tc.fetch == nil {
					assert.Nil(t, f.rec.statuses[m1], "a refused token binds nothing")
				} else {
					assert.Equal(t, *tc.fetch, *f.rec.statuses[m1].ConfigFetch, "a refused token changes no binding")
				}

				return
			}

			assert.Equal(t, config, rec.Body.String())
			assert.Equal(t, tc.path, f.rec.statuses[m1].ConfigFetch.Path, "the path the handoff took")
		})
	}
}

// TestMetadataOverTLS: a Talos that reads talos.config.early fetches its configuration
// over HTTPS; the same token over plain HTTP is someone else's, refused (counted, nothing
// bound, nothing held) before the machine's own fetch, which then gets it. An older Talos
// fetches it over plain HTTP.
func TestMetadataOverTLS(t *testing.T) {
	t.Parallel()

	const (
		machineAddr  = "192.0.2.1"
		strangerAddr = "192.0.2.66"
		config       = "version: v1alpha1\n"
	)

	for name, tc := range map[string]struct {
		version   string
		plainCode int
	}{
		"Talos 1.13, over TLS only":        {"v1.13.9", http.StatusForbidden},
		"Talos 1.10, without early config": {"v1.10.7", http.StatusOK},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()

			f := newFixture(t)
			f.scripts.TLSBaseURL, f.scripts.EarlyConfig = "https://10.77.0.1:50042", "KLUv/the-provider-CA"
			f.machine(t, m1, machineAddr, lifecycle.BootTalos, &resources.MachineIntentSpec{Acceptance: resources.AcceptanceAccepted,
				Allocation: &resources.Allocation{ID: "a1", TalosVersion: tc.version, Config: config}}, nil)

			fetch := func(from string, overTLS bool) *httptest.ResponseRecorder {
				rec := httptest.NewRecorder()
				req := httptest.NewRequest(http.MethodGet, "/metadata/"+m1+"?token="+token.Sign(f.scripts.TokenKey, boot.MetadataClaims(m1, "a1")), nil)
				req.RemoteAddr = from + ":40000"

				if overTLS {
					req.TLS = &tls.ConnectionState{HandshakeComplete: true}
				}

				f.server.Handler().ServeHTTP(rec, req)

				return rec
			}

			rec := fetch(strangerAddr, false)
			require.Equal(t, tc.plainCode, rec.Code, rec.Body.String())

			if tc.plainCode == http.StatusOK {
				assert.Equal(t, config, rec.Body.String())
				assert.Zero(t, tampertest.Count(t, f.registry, tamper.PlainConfigFetch))

				return
			}

			assert.NotContains(t, rec.Body.String(), "v1alpha1")
			assert.Equal(t, 1.0, tampertest.Count(t, f.registry, tamper.PlainConfigFetch))
			assert.Nil(t, f.rec.statuses[m1], "a refused token binds nothing")
			assert.Empty(t, f.held(t, m1), "nothing leaked: the machine is not held")

			rec = fetch(machineAddr, true)
			require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
			assert.Equal(t, config, rec.Body.String())
			assert.Equal(t, machineAddr, f.rec.statuses[m1].ConfigFetch.By, "the token is bound to the machine's Talos")
		})
	}
}

// TestMetadataBindsWithoutConfig: a Talos asking for a configuration that is not there
// (an allocation made without one) binds the token to its address all the same: its
// install events count, and nobody else's.
func TestMetadataBindsWithoutConfig(t *testing.T) {
	t.Parallel()

	f := newFixture(t)
	f.machine(t, m1, "192.0.2.1", lifecycle.BootTalos, &resources.MachineIntentSpec{Acceptance: resources.AcceptanceAccepted,
		Allocation: &resources.Allocation{ID: "a1", TalosVersion: "v1.9.0"}}, nil)

	addr, sink := f.serveEventSink(t)

	resp, err := http.Get("http://" + addr + "/metadata/" + m1 + "?token=" + token.Sign(f.scripts.TokenKey, boot.MetadataClaims(m1, "a1")))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)

	_, err = sink.Publish(t.Context(), failedSequence(t, "install", installRebooted))
	require.NoError(t, err)
	assert.Equal(t, []string{m1 + "/a1/event-sink"}, f.rec.records)
}

// TestMetadataInOmniMode: in Omni mode an allocation without a config of its own is
// served Omni's join config documents, to its machine only, once the adapter has said
// them; an allocation's own config still wins.
func TestMetadataInOmniMode(t *testing.T) {
	t.Parallel()

	f := newFixture(t)
	key := f.scripts.TokenKey

	var join string

	f.server = httpapi.New(httpapi.Options{
		State: f.store, View: f.view, Scripts: f.scripts, Observations: f.obs, Installs: f.rec,
		Registry: prometheus.NewRegistry(), Logger: zaptest.NewLogger(t),
		JoinConfig: func() (string, bool) { return join, join != "" },
	})

	f.machine(t, m1, "192.0.2.1", lifecycle.BootTalos, &resources.MachineIntentSpec{Acceptance: resources.AcceptanceAccepted,
		Allocation: &resources.Allocation{ID: "a1", TalosVersion: "v1.9.0"}}, nil)
	f.machine(t, m2, "192.0.2.2", lifecycle.BootTalos, &resources.MachineIntentSpec{Acceptance: resources.AcceptanceAccepted,
		Allocation: &resources.Allocation{ID: "a2", TalosVersion: "v1.9.0", Config: "version: v1alpha1\n"}}, nil)

	own := "/metadata/" + m1 + "?token=" + token.Sign(key, boot.MetadataClaims(m1, "a1"))

	code, body := f.get(t, own)
	assert.Equal(t, http.StatusNotFound, code, "the join config is not known yet: %s", body)

	join = "apiVersion: v1alpha1\nkind: SideroLinkConfig\napiUrl: grpc://10.77.0.3:8090?jointoken=x\n"

	code, body = f.get(t, own)
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, join, body)

	code, _ = f.get(t, "/metadata/"+m1+"?token="+token.Sign(key, boot.MetadataClaims(m2, "a2")))
	assert.Equal(t, http.StatusForbidden, code, "to its machine only")

	code, body = f.get(t, "/metadata/"+m2+"?token="+token.Sign(key, boot.MetadataClaims(m2, "a2")))
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "version: v1alpha1\n", body, "an allocation's own config wins")
}

func sequenceEvent(t *testing.T, sequence string, action machine.SequenceEvent_Action, failed bool) *events.EventRequest {
	t.Helper()

	ev := &machine.SequenceEvent{Sequence: sequence, Action: action}
	if failed {
		ev.Error = &common.Error{Message: "install failed"}
	}

	return talosEvent(t, ev)
}

// Talos' words for its install sequence ending in the reboot into the installed system,
// and for one whose installer failed (v1.13's controller: "sequence failed: " and the
// phase's error).
const (
	installRebooted = "sequence failed: error running phase 8 in install sequence: task 1/1: failed, unix.Reboot(45584543)"
	installFailed   = "sequence failed: error running phase 2 in install sequence: task 1/1: failed, failed to install: exit status 1"
)

// failedSequence is Talos' event for a sequence that ended in an error.
func failedSequence(t *testing.T, sequence, message string) *events.EventRequest {
	t.Helper()

	return talosEvent(t, &machine.SequenceEvent{
		Sequence: sequence, Action: machine.SequenceEvent_NOOP,
		Error: &common.Error{Code: common.Code_FATAL, Message: message},
	})
}

func phaseEvent(t *testing.T, phase string, action machine.PhaseEvent_Action) *events.EventRequest {
	t.Helper()

	return talosEvent(t, &machine.PhaseEvent{Phase: phase, Action: action})
}

// talosEvent is the event as Talos' event sink client sends it.
func talosEvent(t *testing.T, msg proto.Message) *events.EventRequest {
	t.Helper()

	data, err := anypb.New(msg)
	require.NoError(t, err)

	return &events.EventRequest{Id: "1", Data: data}
}

// installEvents are real Talos' events of an install, from the sequence's start to its
// kexec phase.
func installEvents(t *testing.T) []*events.EventRequest {
	t.Helper()

	var evs []*events.EventRequest

	evs = append(evs, sequenceEvent(t, "install", machine.SequenceEvent_START, false))

	for _, phase := range []string{"env", "install", "meta", "saveMeta", "volumeFinalize", "stopEverything"} {
		evs = append(evs, phaseEvent(t, phase, machine.PhaseEvent_START), phaseEvent(t, phase, machine.PhaseEvent_STOP))
	}

	return append(evs, phaseEvent(t, "kexec", machine.PhaseEvent_START))
}

// serveEventSink serves f's server on a loopback port until the test ends, and returns
// its address and an event sink client of it, as Talos dials it (plaintext HTTP/2).
func (f *fixture) serveEventSink(t *testing.T) (string, events.EventSinkServiceClient) {
	t.Helper()

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)

	go func() { done <- f.server.Serve(ctx, lis) }()

	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})

	addr := lis.Addr().String()

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })

	return addr, events.NewEventSinkServiceClient(conn)
}

// TestEventSink drives the event sink with a real gRPC client over plaintext HTTP/2, as
// Talos does: an install sequence that got to its kexec phase marks the machine
// installed; a failed one, whose STOP Talos publishes all the same, does not.
func TestEventSink(t *testing.T) {
	t.Parallel()

	f := newFixture(t)
	alloc := &resources.Allocation{ID: "a1", TalosVersion: "v1.9.0"}

	addr, sink := f.serveEventSink(t)
	ctx := t.Context()

	publish := func(evs ...*events.EventRequest) {
		t.Helper()

		for _, ev := range evs {
			_, err := sink.Publish(ctx, ev)
			require.NoError(t, err)
		}
	}

	// No machine booted Talos from 127.0.0.1 yet: its sequences are not followed, and an
	// install is refused.
	publish(installEvents(t)...)

	_, err := sink.Publish(ctx, failedSequence(t, "install", installRebooted))
	assert.Equal(t, codes.PermissionDenied, grpcstatus.Code(err))

	f.machine(t, m1, "127.0.0.1", lifecycle.BootTalos, &resources.MachineIntentSpec{Acceptance: resources.AcceptanceAccepted, Allocation: alloc}, nil)

	// Fetching the machine's Talos boot script from 127.0.0.1 vouches for nothing: any
	// host may fetch one for the machine's UUID.
	_, err = sink.Publish(ctx, failedSequence(t, "install", installRebooted))
	assert.Equal(t, codes.PermissionDenied, grpcstatus.Code(err), "from the boot script's address")

	f.configFetched(t, m1, "a1", "127.0.0.1")

	// A failed install: its phases stop at the installer's; Talos publishes the
	// sequence's STOP, then its failure.
	publish(
		sequenceEvent(t, "install", machine.SequenceEvent_START, false),
		phaseEvent(t, "env", machine.PhaseEvent_START), phaseEvent(t, "env", machine.PhaseEvent_STOP),
		phaseEvent(t, "install", machine.PhaseEvent_START), phaseEvent(t, "install", machine.PhaseEvent_STOP),
		sequenceEvent(t, "install", machine.SequenceEvent_STOP, false),
		failedSequence(t, "install", installFailed),
		sequenceEvent(t, "install", machine.SequenceEvent_STOP, true),
	)

	// Another sequence's kexec phase (an upgrade's, a reboot's) is not an install.
	publish(
		sequenceEvent(t, "boot", machine.SequenceEvent_START, false),
		phaseEvent(t, "kexec", machine.PhaseEvent_START),
		sequenceEvent(t, "boot", machine.SequenceEvent_STOP, false),
		phaseEvent(t, "kexec", machine.PhaseEvent_START),
	)

	assert.Empty(t, f.rec.records, "only an install that got to its kexec phase marks a machine installed")

	_, err = sink.Publish(ctx, &events.EventRequest{Id: "2"})
	assert.Equal(t, codes.InvalidArgument, grpcstatus.Code(err))

	for _, typ := range []string{"machine.SequenceEvent", "machine.PhaseEvent"} {
		_, err = sink.Publish(ctx, &events.EventRequest{Id: "3", Data: &anypb.Any{TypeUrl: "talos/runtime/" + typ, Value: []byte{0xff, 0xff}}})
		assert.Equal(t, codes.InvalidArgument, grpcstatus.Code(err), typ)
	}

	// The install that worked: its kexec phase starts.
	publish(installEvents(t)...)
	assert.Equal(t, []string{m1 + "/a1/event-sink"}, f.rec.records)

	// Plain HTTP still works on the same port.
	resp, err := http.Get("http://" + addr + "/healthz")
	require.NoError(t, err)

	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, "ok\n", string(body))
}

// TestEventSinkInstallReboot: the install sequence's end in the reboot into the
// installed system (Talos reports it as the sequence failing with unix.Reboot; Sidero
// and Omni count it) marks the machine installed when its kexec phase was missed; a
// machine installed already is not recorded again.
func TestEventSinkInstallReboot(t *testing.T) {
	t.Parallel()

	f := newFixture(t)
	_, sink := f.serveEventSink(t)
	ctx := t.Context()

	f.machine(t, m1, "127.0.0.1", lifecycle.BootTalos, &resources.MachineIntentSpec{
		Acceptance: resources.AcceptanceAccepted, Allocation: &resources.Allocation{ID: "a1", TalosVersion: "v1.9.0"},
	}, &resources.MachineStatusSpec{ConfigFetch: &resources.ConfigFetchRecord{AllocationID: "a1", By: "127.0.0.1"}})

	_, err := sink.Publish(ctx, failedSequence(t, "install", installRebooted))
	require.NoError(t, err)
	assert.Equal(t, []string{m1 + "/a1/event-sink"}, f.rec.records)

	g := newFixture(t)
	_, sink = g.serveEventSink(t)

	g.machine(t, m1, "127.0.0.1", lifecycle.BootTalos, &resources.MachineIntentSpec{
		Acceptance: resources.AcceptanceAccepted, Allocation: &resources.Allocation{ID: "a1", TalosVersion: "v1.9.0"},
	}, &resources.MachineStatusSpec{InstalledAllocation: "a1", InstalledBy: "event-sink", ConfigFetch: &resources.ConfigFetchRecord{AllocationID: "a1", By: "127.0.0.1"}})

	for _, ev := range append(installEvents(t), failedSequence(t, "install", installRebooted)) {
		_, err = sink.Publish(ctx, ev)
		require.NoError(t, err)
	}

	assert.Empty(t, g.rec.records, "installed already")
}

// Over IPv6 Talos speaks from another address than the one iPXE booted it from: its
// install events are taken from the address that fetched its config with the token of
// its allocation, and only while that allocation stands.
func TestEventSinkFromConfigAddress(t *testing.T) {
	t.Parallel()

	f := newFixture(t)
	alloc := &resources.Allocation{ID: "a1", TalosVersion: "v1.9.0", Config: "version: v1alpha1\n"}

	// iPXE booted Talos from its DHCPv6 address; Talos will speak from 127.0.0.1.
	f.machine(t, m1, "fd77::a", lifecycle.BootTalos, &resources.MachineIntentSpec{Acceptance: resources.AcceptanceAccepted, Allocation: alloc}, nil)

	addr, sink := f.serveEventSink(t)
	ctx := t.Context()
	install := failedSequence(t, "install", installRebooted)

	_, err := sink.Publish(ctx, install)
	assert.Equal(t, codes.PermissionDenied, grpcstatus.Code(err), "before the config fetch")

	fetch := func(claims token.Claims) int {
		resp, err := http.Get("http://" + addr + "/metadata/" + m1 + "?token=" + token.Sign(f.scripts.TokenKey, claims))
		require.NoError(t, err)
		resp.Body.Close()

		return resp.StatusCode
	}

	// A refused fetch (another allocation's token) vouches for nothing.
	assert.Equal(t, http.StatusForbidden, fetch(boot.MetadataClaims(m1, "a0")))

	_, err = sink.Publish(ctx, install)
	assert.Equal(t, codes.PermissionDenied, grpcstatus.Code(err), "after a refused fetch")

	assert.Equal(t, http.StatusOK, fetch(boot.MetadataClaims(m1, "a1")))

	_, err = sink.Publish(ctx, install)
	require.NoError(t, err)
	assert.Equal(t, []string{m1 + "/a1/event-sink"}, f.rec.records)

	// A new allocation: the address vouched for the old one only.
	_, err = safe.StateUpdateWithConflicts(ctx, f.store, resources.NewMachineIntent(m1).Metadata(), func(in *resources.MachineIntent) error {
		in.TypedSpec().Allocation = &resources.Allocation{ID: "a2", TalosVersion: "v1.9.0", Config: "x"}

		return nil
	})
	require.NoError(t, err)

	require.Eventually(t, func() bool {
		e := f.view.Get(m1)

		return e != nil && e.Intent != nil && e.Intent.Allocation != nil && e.Intent.Allocation.ID == "a2"
	}, 10*time.Second, 10*time.Millisecond)

	_, err = sink.Publish(ctx, install)
	assert.Equal(t, codes.PermissionDenied, grpcstatus.Code(err), "under the next allocation")
}

// TestHealthWaitsForTheView: /healthz and /readyz say ok only once boot requests can be
// answered.
func TestHealthWaitsForTheView(t *testing.T) {
	t.Parallel()

	store, err := resources.Open(t.Context(), t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { store.Close() })

	view := machineview.New()
	srv := httpapi.New(httpapi.Options{
		State: store, View: view, Scripts: &boot.Scripts{}, Observations: make(chan controllers.PXEObservation, 1),
		Registry: prometheus.NewRegistry(), Logger: zaptest.NewLogger(t),
	})

	get := func(target string) int {
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))

		return rec.Code
	}

	assert.Equal(t, http.StatusServiceUnavailable, get("/healthz"))
	assert.Equal(t, http.StatusServiceUnavailable, get("/readyz"))
	assert.Equal(t, http.StatusServiceUnavailable, get(bootURL(m1)))

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)

	go func() { done <- view.Run(ctx, store) }()

	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})

	<-view.Ready()
	assert.Equal(t, http.StatusOK, get("/healthz"))
	assert.Equal(t, http.StatusOK, get("/readyz"))
}

// closingListener is a listener whose owner closes it as ctx ends, as portmux's
// listeners are: its Accept ends ctx, then reports the listener closed.
type closingListener struct {
	net.Listener
	cancel context.CancelFunc
}

func (l closingListener) Accept() (net.Conn, error) {
	l.cancel()

	return nil, net.ErrClosed
}

// TestServeStopsWhenListenerClosesWithContext: a listener closed with ctx makes Serve
// return net.ErrClosed, possibly before Shutdown: that is a stop, not an error.
func TestServeStopsWhenListenerClosesWithContext(t *testing.T) {
	t.Parallel()

	f := newFixture(t)

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { lis.Close() })

	for range 16 {
		ctx, cancel := context.WithCancel(t.Context())

		require.NoError(t, f.server.Serve(ctx, closingListener{Listener: lis, cancel: cancel}))
	}

	// A listener failing while ctx lives is still an error.
	broken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	require.NoError(t, broken.Close())
	require.ErrorIs(t, f.server.Serve(t.Context(), broken), net.ErrClosed)
}
