package pki_test

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/provider/internal/pki"
)

func TestLoadCreatesOnceAndReloads(t *testing.T) {
	t.Parallel()

	dir := t.TempDir()

	ca, err := pki.Load(dir)
	require.NoError(t, err)

	again, err := pki.Load(dir)
	require.NoError(t, err)
	assert.Equal(t, ca.Fingerprint(), again.Fingerprint())
	assert.Len(t, ca.Fingerprint(), 64)

	for _, name := range []string{pki.CACertFile, "ca.key", pki.AdminCertFile, pki.AdminKeyFile} {
		st, err := os.Stat(filepath.Join(dir, name))
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), st.Mode().Perm(), name)
	}
}

// TestMutualTLS: the admin certificate gets in; a client without one, or with a
// certificate from another CA, does not.
func TestMutualTLS(t *testing.T) {
	t.Parallel()

	dir, otherDir := t.TempDir(), t.TempDir()

	ca, err := pki.Load(dir)
	require.NoError(t, err)

	_, err = pki.Load(otherDir)
	require.NoError(t, err)

	serverCfg, err := ca.MutualTLS([]string{"127.0.0.1"})
	require.NoError(t, err)

	lis, err := tls.Listen("tcp", "127.0.0.1:0", serverCfg)
	require.NoError(t, err)
	t.Cleanup(func() { lis.Close() })

	go func() {
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}

			go func() {
				defer conn.Close()

				_ = conn.(*tls.Conn).Handshake() // the client's side is what the test checks
				_, _ = conn.Write([]byte("ok"))
			}()
		}
	}()

	dial := func(certDir string) error {
		caPEM, err := os.ReadFile(filepath.Join(dir, pki.CACertFile))
		require.NoError(t, err)

		roots := x509.NewCertPool()
		require.True(t, roots.AppendCertsFromPEM(caPEM))

		cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS13}

		if certDir != "" {
			pair, err := tls.LoadX509KeyPair(filepath.Join(certDir, pki.AdminCertFile), filepath.Join(certDir, pki.AdminKeyFile))
			require.NoError(t, err)

			cfg.Certificates = []tls.Certificate{pair}
		}

		conn, err := tls.DialWithDialer(&net.Dialer{}, "tcp", lis.Addr().String(), cfg)
		if err != nil {
			return err
		}

		defer conn.Close()

		buf := make([]byte, 2)
		_, err = conn.Read(buf)

		return err
	}

	assert.NoError(t, dial(dir))
	assert.Error(t, dial(""), "no client certificate")
	assert.Error(t, dial(otherDir), "a client certificate from another CA")
}
