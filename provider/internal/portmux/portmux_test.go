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
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, name+" "+r.Proto)
		})
	}

	plain := &http.Server{Handler: handler("plain"), ReadHeaderTimeout: time.Second}
	secure := httptest.NewUnstartedServer(handler("https"))
	secure.Listener = mux.HTTPS()
	secure.StartTLS()

	// What gRPC's clients reach: a TLS server that speaks HTTP/2 alone.
	grpcLike := httptest.NewUnstartedServer(handler("grpc"))
	grpcLike.Listener = mux.TLS()
	grpcLike.EnableHTTP2 = true
	grpcLike.StartTLS()

	go plain.Serve(mux.Plain()) //nolint:errcheck // ends with Close

	t.Cleanup(func() {
		secure.Close()
		grpcLike.Close()
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
	// The test servers' own certificates are not checked.
	insecure := func(protos ...string) *tls.Config {
		return &tls.Config{InsecureSkipVerify: true, NextProtos: protos}
	}

	for name, tc := range map[string]struct {
		client *http.Client
		url    string
		want   string
	}{
		"plain HTTP": {http.DefaultClient, "http://" + addr + "/", "plain HTTP/1.1"},
		"HTTPS, no ALPN": {
			&http.Client{Transport: &http.Transport{TLSClientConfig: insecure()}},
			"https://" + addr + "/", "https HTTP/1.1",
		},
		"HTTPS, HTTP/2 or HTTP/1.1 (Go's default transport, curl, browsers)": {
			&http.Client{Transport: &http.Transport{TLSClientConfig: insecure("h2", "http/1.1"), ForceAttemptHTTP2: true}},
			"https://" + addr + "/", "https HTTP/1.1",
		},
	} {
		for range 3 {
			assert.Equal(t, tc.want, get(tc.client, tc.url), name)
		}
	}

	// gRPC's client offers HTTP/2 alone: it reaches the server that speaks it (the
	// HTTPS server would refuse the handshake, having no protocol in common).
	for range 3 {
		c, err := tls.Dial("tcp", addr, insecure("h2"))
		require.NoError(t, err)
		assert.Equal(t, "h2", c.ConnectionState().NegotiatedProtocol)
		require.NoError(t, c.Close())
	}

	// A connection that says nothing and hangs up does not disturb the others, nor one
	// that hangs up in the middle of its hello, nor one whose hello is not one.
	for _, b := range [][]byte{nil, {0x16, 0x03, 0x01, 0x02}, {0x16, 0x03, 0x01, 0x00, 0x03, 0xff, 0xff, 0xff}} {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)

		_, err = c.Write(b)
		require.NoError(t, err)
		require.NoError(t, c.Close())
	}

	assert.Equal(t, "plain HTTP/1.1", get(http.DefaultClient, "http://"+addr+"/"))
}
