package earlyconfig

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"math/big"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testCA is a CA like the provider's (P-256, a short subject).
func testCA(t *testing.T) (*x509.Certificate, []byte) {
	t.Helper()

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)

	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "anvil-ca", Organization: []string{"anvil"}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(10 * 365 * 24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}

	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)

	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)

	return cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func TestTrustedRootsRoundTrip(t *testing.T) {
	t.Parallel()

	ca, caPEM := testCA(t)
	other, _ := testCA(t)

	value, err := TrustedRoots(caPEM)
	require.NoError(t, err)

	// It is one kernel argument and leaves room on a 2 KiB kernel line for the factory's
	// cmdline, the metadata URL and Omni's join arguments.
	assert.NotContains(t, value, " ")
	assert.Less(t, len(Param)+1+len(value), 800, "talos.config.early is %d bytes", len(value))

	pool, err := Roots(value)
	require.NoError(t, err)

	_, err = ca.Verify(x509.VerifyOptions{Roots: pool})
	require.NoError(t, err, "the CA is trusted")

	_, err = other.Verify(x509.VerifyOptions{Roots: pool})
	require.Error(t, err, "another CA is not")
}

func TestTrustedRootsRefusesNothing(t *testing.T) {
	t.Parallel()

	_, err := TrustedRoots(nil)
	require.Error(t, err)
}

func TestRootsBadInput(t *testing.T) {
	t.Parallel()

	for name, value := range map[string]string{
		"not base64":  "%%%",
		"not zstd":    base64.StdEncoding.EncodeToString([]byte("plain text")),
		"empty":       "",
		"no document": mustCompress(t, "{}\n"),
		"no roots":    mustCompress(t, "apiVersion: v1alpha1\nkind: TrustedRootsConfig\nname: x\ncertificates: \"\"\n"),
		"not PEM":     mustCompress(t, "apiVersion: v1alpha1\nkind: TrustedRootsConfig\nname: x\ncertificates: hello\n"),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()

			_, err := Roots(value)
			require.Error(t, err)
		})
	}
}

func TestSupported(t *testing.T) {
	t.Parallel()

	for version, want := range map[string]bool{
		"v1.13.9":         true,
		"1.11.0":          true,
		"v1.11.0-alpha.0": true,
		"v1.14.0-alpha.2": true,
		"v2.0.0":          true,
		"v1.10.7":         false,
		"v1.9.0":          false,
		"":                false,
		"latest":          false,
	} {
		assert.Equal(t, want, Supported(version), version)
	}
}

func mustCompress(t *testing.T, yaml string) string {
	t.Helper()

	// TrustedRoots' own compression, of a document it would not write.
	value, err := compress([]byte(yaml))
	require.NoError(t, err)

	return value
}
