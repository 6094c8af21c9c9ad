package httpapi_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"go.uber.org/zap/zaptest"

	"github.com/anvil-metal/anvil/provider/internal/boot"
	"github.com/anvil-metal/anvil/provider/internal/controllers"
	"github.com/anvil-metal/anvil/provider/internal/httpapi"
	"github.com/anvil-metal/anvil/provider/internal/machineview"
)

func TestConsoleRedirect(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name, consoleURL, host, target string
		code                           int
		location                       string
	}{
		{"at the browser's host", "https://10.0.0.5:50043/ui/", "prov.example:50042", "/ui/machines/m1?done=x", http.StatusTemporaryRedirect, "https://prov.example:50043/ui/machines/m1?done=x"},
		{"IPv6", "https://10.0.0.5:50043/ui/", "[fd00::5]:50042", "/ui/", http.StatusTemporaryRedirect, "https://[fd00::5]:50043/ui/"},
		{"no port in Host", "https://10.0.0.5:8443/ui/", "prov", "/ui/", http.StatusTemporaryRedirect, "https://prov:8443/ui/"},
		{"console off", "", "prov:50042", "/ui/", http.StatusNotFound, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			srv := httpapi.New(httpapi.Options{
				View: machineview.New(), Scripts: &boot.Scripts{}, Observations: make(chan controllers.PXEObservation, 1),
				ConsoleURL: tc.consoleURL, Registry: prometheus.NewRegistry(), Logger: zaptest.NewLogger(t),
			})

			req := httptest.NewRequest(http.MethodGet, tc.target, nil)
			req.Host = tc.host

			rec := httptest.NewRecorder()
			srv.Handler().ServeHTTP(rec, req)

			assert.Equal(t, tc.code, rec.Code)
			assert.Equal(t, tc.location, rec.Header().Get("Location"))
		})
	}
}
