package httpapi_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"go.uber.org/zap/zaptest"

	"github.com/anvil-metal/anvil/internal/token"
	"github.com/anvil-metal/anvil/provider/internal/boot"
	"github.com/anvil-metal/anvil/provider/internal/httpapi"
	"github.com/anvil-metal/anvil/provider/internal/lifecycle"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// TestUncleanPaths: every route the provider serves answers at its clean path as it did,
// a trailing slash included; any other spelling of a path is a 400 that echoes nothing of
// the request, where ServeMux would have redirected with the query (a token) in Location.
func TestUncleanPaths(t *testing.T) {
	t.Parallel()

	f := newFixture(t)
	f.server = httpapi.New(httpapi.Options{
		State: f.store, View: f.view, Scripts: f.scripts, Observations: f.obs, Installs: f.rec,
		ConsoleURL: "https://10.0.0.5:50043/ui/", Registry: prometheus.NewRegistry(), Logger: zaptest.NewLogger(t),
	})

	f.machine(t, m1, "192.0.2.1", lifecycle.BootTalos, &resources.MachineIntentSpec{
		Acceptance: resources.AcceptanceAccepted, Allocation: &resources.Allocation{ID: "a1", TalosVersion: "v1.9.0", Config: "version: v1alpha1\n"},
	}, nil)

	secret := token.Sign(f.scripts.TokenKey, boot.MetadataClaims(m1, "a1"))
	query := "?token=" + secret
	talos := "/assets/talos/" + strings.Repeat("0", 64) + "/v1.9.0/kernel-amd64"

	for _, tc := range []struct {
		name, target string
		code         int
	}{
		{"health", "/healthz", http.StatusOK},
		{"iPXE start", "/ipxe/start.ipxe", http.StatusOK},
		{"iPXE boot", bootURL(m1), http.StatusOK},
		{"agent asset", "/assets/agent/vmlinuz-amd64", http.StatusOK},
		{"unknown agent asset", "/assets/agent/cmdline-amd64", http.StatusNotFound},
		{"Talos asset without a cache", talos, http.StatusServiceUnavailable},
		{"metadata", "/metadata/" + m1 + query, http.StatusOK},
		{"metadata, trailing slash", "/metadata/" + m1 + "/" + query, http.StatusNotFound},
		{"metrics", "/metrics", http.StatusOK},
		{"console", "/ui/", http.StatusTemporaryRedirect},
		{"console page", "/ui/machines/" + m1, http.StatusTemporaryRedirect},
		{"console without its slash", "/ui", http.StatusTemporaryRedirect}, // the mux adds the slash
		{"root", "/", http.StatusNotFound},

		{"no path", "http://10.77.0.1:50042" + query, http.StatusBadRequest},
		{"dot id", "/metadata/." + query, http.StatusBadRequest},
		{"dot-dot id", "/metadata/.." + query, http.StatusBadRequest},
		{"doubled slashes and dot-dot", "//metadata/..//x" + query, http.StatusBadRequest},
		{"doubled slash", "/metadata//" + m1 + query, http.StatusBadRequest},
		{"dot segment", "/metadata/./" + m1 + query, http.StatusBadRequest},
		{"dot-dot segment", "/ipxe/../metadata/" + m1 + query, http.StatusBadRequest},
		{"encoded dot-dot", "/metadata/%2e%2e" + query, http.StatusBadRequest},
		{"encoded slash", "/metadata/" + m1 + "%2F..%2f" + m2 + query, http.StatusBadRequest},
		{"encoded slash in an asset name", "/assets/agent/..%2fprovider.key", http.StatusBadRequest},
		{"encoded slash between segments", "/assets%2Fagent/vmlinuz-amd64", http.StatusBadRequest},
		{"iPXE boot, doubled slash", "/ipxe//boot.ipxe?uuid=" + m1, http.StatusBadRequest},
		{"metrics, dot segment", "/./metrics", http.StatusBadRequest},
		{"console, doubled trailing slash", "/ui//", http.StatusBadRequest},
		{"console, dot segment", "/ui/./machines" + query, http.StatusBadRequest},
		{"console, trailing dot-dot", "/ui/.." + query, http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			f.server.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tc.target, nil))

			assert.Equal(t, tc.code, rec.Code)

			if tc.code != http.StatusBadRequest {
				return
			}

			assert.Equal(t, "bad request: the path is not in canonical form\n", rec.Body.String())
			assert.Empty(t, rec.Header().Get("Location"))

			for name, values := range rec.Header() {
				assert.NotContains(t, strings.Join(values, " "), secret, name)
			}
		})
	}
}
