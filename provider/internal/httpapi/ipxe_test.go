package httpapi_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/anvil-metal/anvil/provider/internal/boottrace"
	"github.com/anvil-metal/anvil/provider/internal/httpapi"
	"github.com/anvil-metal/anvil/provider/internal/lifecycle"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

const m3 = "4c4c4544-0000-1000-8000-000000000003"

// discardWriter is a ResponseWriter that keeps only the status, so that a benchmark
// counts the handler's allocations rather than a recorder's.
type discardWriter struct {
	h      http.Header
	status int
	n      int
}

func (w *discardWriter) Header() http.Header { return w.h }

func (w *discardWriter) WriteHeader(status int) { w.status = status }

func (w *discardWriter) Write(b []byte) (int, error) {
	w.n += len(b)

	return len(b), nil
}

func (w *discardWriter) WriteString(s string) (int, error) {
	w.n += len(s)

	return len(s), nil
}

func TestBootScriptHeaders(t *testing.T) {
	t.Parallel()

	f := newFixture(t)

	for range 2 {
		rec := httptest.NewRecorder()
		f.server.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, bootURL(m1), nil))
		require.Equal(t, http.StatusOK, rec.Code)
		assert.Equal(t, "text/plain; charset=utf-8", rec.Header().Get("Content-Type"))
		assert.Equal(t, "no-store", rec.Header().Get("Cache-Control"))

		// Changing one answer's headers must not change the next one's.
		rec.Header().Set("Content-Type", "changed")
		rec.Header().Add("Cache-Control", "changed")
	}
}

func TestTalosScriptFollowsTheAllocation(t *testing.T) {
	t.Parallel()

	f := newFixture(t)
	intent := &resources.MachineIntentSpec{
		Acceptance: resources.AcceptanceAccepted,
		Allocation: &resources.Allocation{ID: "a1", TalosVersion: "v1.9.0", SchematicID: s1},
	}

	f.machine(t, m2, "192.0.2.2", lifecycle.BootTalos, intent, nil)

	for range 2 {
		code, body := f.get(t, bootURL(m2))
		require.Equal(t, http.StatusOK, code)
		assert.Contains(t, body, "/image/"+s1+"/v1.9.0/kernel-amd64")
	}

	in := resources.NewMachineIntent(m2)
	intent.Allocation = &resources.Allocation{ID: "a2", TalosVersion: "v1.10.0", SchematicID: s2}
	*in.TypedSpec() = *intent

	cur, err := f.store.Get(t.Context(), in.Metadata())
	require.NoError(t, err)

	in.Metadata().SetVersion(cur.Metadata().Version())
	require.NoError(t, f.store.Update(t.Context(), in))

	// The view takes the new intent in its own time: ask until the answer changes (a
	// script cached for the old allocation would never change).
	var body string

	require.Eventually(t, func() bool {
		code, b := f.get(t, bootURL(m2))
		body = b

		return code == http.StatusOK && strings.Contains(b, "/image/"+s2+"/v1.10.0/kernel-amd64")
	}, 5e9, 1e6, "a new allocation renders anew")
	assert.NotContains(t, body, s1)
}

// BenchmarkBootScript is one boot-script answer per kind of machine, the handler alone
// (no connection): its time and allocations.
func BenchmarkBootScript(b *testing.B) {
	f := newFixture(b)
	alloc := &resources.Allocation{ID: "a1", TalosVersion: "v1.9.0", SchematicID: s1}

	f.machine(b, m1, "192.0.2.1", lifecycle.BootAgent, &resources.MachineIntentSpec{Acceptance: resources.AcceptanceAccepted}, nil)
	f.machine(b, m2, "192.0.2.2", lifecycle.BootTalos, &resources.MachineIntentSpec{Acceptance: resources.AcceptanceAccepted, Allocation: alloc}, nil)
	f.machine(b, m3, "192.0.2.3", lifecycle.BootDisk, &resources.MachineIntentSpec{Acceptance: resources.AcceptanceRejected}, nil)

	// Observations are news to the controller, which the benchmark has not: drain them.
	go func() {
		for {
			select {
			case <-b.Context().Done():
				return
			case <-f.obs:
			}
		}
	}()

	// As the provider runs it: with the boot timelines recorded.
	traced := httpapi.New(httpapi.Options{
		State: f.store, View: f.view, Scripts: f.scripts, Observations: f.obs, Installs: f.rec,
		Trace: boottrace.New(nil), Registry: prometheus.NewRegistry(), Logger: zap.NewNop(),
	})

	for _, tc := range []struct {
		name, id string
		server   *httpapi.Server
	}{
		{"agent", m1, f.server}, {"talos", m2, f.server}, {"disk", m3, f.server},
		{"agent-traced", m1, traced}, {"talos-traced", m2, traced}, {"disk-traced", m3, traced},
	} {
		b.Run(tc.name, func(b *testing.B) {
			req := httptest.NewRequest(http.MethodGet, bootURL(tc.id), nil)
			req.RemoteAddr = "192.0.2.9:1234"
			w := &discardWriter{h: http.Header{}}
			h := tc.server.Handler()

			b.ReportAllocs()

			for b.Loop() {
				clear(w.h)
				h.ServeHTTP(w, req)

				if w.status != http.StatusOK {
					b.Fatalf("status %d", w.status)
				}
			}
		})
	}
}
