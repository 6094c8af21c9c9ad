package labpki_test

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/hack/internal/labpki"
)

// TestServerVerified: a server with a certificate the lab CA issued for its address is
// verified by a client that trusts the CA's file, and by no client that does not.
func TestServerVerified(t *testing.T) {
	t.Parallel()

	ca, err := labpki.NewCA("test lab CA")
	require.NoError(t, err)
	assert.True(t, ca.Cert.IsCA)

	pair, err := ca.IssueServer("127.0.0.1", "omni.lab")
	require.NoError(t, err)

	dir := t.TempDir()
	certFile, keyFile, caFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "ca.crt")
	require.NoError(t, pair.Write(certFile, keyFile))
	require.NoError(t, os.WriteFile(caFile, ca.CertPEM, 0o644))

	st, err := os.Stat(keyFile)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm(), "the key is its owner's only")

	block, _ := pem.Decode(pair.CertPEM)
	require.NotNil(t, block)

	cert, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)
	assert.Equal(t, []string{"omni.lab"}, cert.DNSNames)
	require.Len(t, cert.IPAddresses, 1)
	assert.Equal(t, "127.0.0.1", cert.IPAddresses[0].String())

	kp, err := tls.LoadX509KeyPair(certFile, keyFile)
	require.NoError(t, err)

	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{kp}, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	t.Cleanup(srv.Close)

	pool, err := labpki.Pool(caFile)
	require.NoError(t, err)

	trusting := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}

	resp, err := trusting.Get(srv.URL)
	require.NoError(t, err)

	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, "ok", string(body))

	other, err := labpki.NewCA("another CA")
	require.NoError(t, err)

	otherPool := x509.NewCertPool()
	otherPool.AddCert(other.Cert)

	distrusting := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: otherPool, MinVersion: tls.VersionTLS12}}}

	_, err = distrusting.Get(srv.URL) // no response to close: the handshake fails
	assert.ErrorContains(t, err, "certificate signed by unknown authority")
}

func TestErrors(t *testing.T) {
	t.Parallel()

	ca, err := labpki.NewCA("test lab CA")
	require.NoError(t, err)

	_, err = ca.IssueServer()
	assert.Error(t, err)

	_, err = labpki.Pool(filepath.Join(t.TempDir(), "missing"))
	assert.Error(t, err)

	empty := filepath.Join(t.TempDir(), "empty")
	require.NoError(t, os.WriteFile(empty, nil, 0o644))

	_, err = labpki.Pool(empty)
	assert.ErrorContains(t, err, "no certificate")
}
