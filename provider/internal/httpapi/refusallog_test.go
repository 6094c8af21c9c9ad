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
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/anvil-metal/anvil/internal/token"
	"github.com/anvil-metal/anvil/provider/internal/boot"
	"github.com/anvil-metal/anvil/provider/internal/httpapi"
)

// TestRefusalLogBounded: what a client claims in a refused request (a machine ID, a
// path of a megabyte) reaches the log bounded.
func TestRefusalLogBounded(t *testing.T) {
	t.Parallel()

	const maxLine = 512

	core, logs := observer.New(zap.DebugLevel)
	key := []byte("0123456789abcdef0123456789abcdef")
	srv := httpapi.New(httpapi.Options{
		Scripts:  &boot.Scripts{Tokens: token.NewSigner(key)},
		Registry: prometheus.NewRegistry(), Logger: zap.New(core),
	}).Handler()

	huge := strings.Repeat("4c4c4544", (1<<20)/8)

	for _, tc := range []struct{ target, message string }{
		{"/metadata/" + huge + "?token=v1.guessed", "metadata request with an invalid token"},
		{"/boot/uki/arm64/" + huge + "/52:54:00:00:00:01/boot.efi", "refused boot request"},
	} {
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tc.target, nil))
		assert.GreaterOrEqual(t, rec.Code, 400, tc.message)

		entries := logs.FilterMessage(tc.message).TakeAll()
		require.Len(t, entries, 1, tc.message)

		line, err := zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()).EncodeEntry(entries[0].Entry, entries[0].Context)
		require.NoError(t, err)
		assert.Less(t, line.Len(), maxLine, "%s: %.200s", tc.message, line.String())
		assert.Contains(t, line.String(), "…(", tc.message)
	}
}
