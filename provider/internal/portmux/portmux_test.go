package portmux_test

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/provider/internal/portmux"
)

func TestTLSAndPlainOnOnePort(t *testing.T) {
	t.Parallel()

	root, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)

	mux := portmux.New(root)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)

	go func() { done <- mux.Run(ctx) }()

	handler := func(name string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, name) })
	}

	plain := &http.Server{Handler: handler("plain"), ReadHeaderTimeout: time.Second}
	secure := httptest.NewUnstartedServer(handler("tls"))
	secure.Listener = mux.TLS()
	secure.StartTLS()

	go plain.Serve(mux.Plain()) //nolint:errcheck // ends with Close

	t.Cleanup(func() {
		secure.Close()
		plain.Close()
		cancel()
		require.NoError(t, <-done)
	})

	get := func(client *http.Client, url string) string {
		resp, err := client.Get(url)
		require.NoError(t, err)

		defer resp.Body.Close()

		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)

		return string(body)
	}

	addr := root.Addr().String()
	tlsClient := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} // a test server's own certificate

	for range 3 {
		assert.Equal(t, "plain", get(http.DefaultClient, "http://"+addr+"/"))
		assert.Equal(t, "tls", get(tlsClient, "https://"+addr+"/"))
	}

	// A connection that says nothing and hangs up does not disturb the others.
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	require.NoError(t, c.Close())
	assert.Equal(t, "plain", get(http.DefaultClient, "http://"+addr+"/"))
}
