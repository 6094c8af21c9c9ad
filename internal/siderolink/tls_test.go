package siderolink

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"net/netip"
	"testing"
	"time"

	pb "github.com/siderolabs/siderolink/api/siderolink"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// selfSigned is a certificate for 127.0.0.1 and the pool that trusts it.
func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)

	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "omni"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}

	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)

	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)

	pool := x509.NewCertPool()
	pool.AddCert(cert)

	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pool
}

// TestProvisionTLS: https:// dials with TLS, verifying Omni's certificate against
// RootCAs; a certificate nobody vouches for gets no request through.
func TestProvisionTLS(t *testing.T) {
	t.Parallel()

	cert, pool := selfSigned(t)

	omniKey, err := wgtypes.GeneratePrivateKey()
	require.NoError(t, err)

	prov := &fakeProvision{answer: func(int, *pb.ProvisionRequest) (*pb.ProvisionResponse, error) {
		return response(omniKey, "fdae::a/64", "127.0.0.1:51820"), nil
	}}
	api := startProvision(t, prov, grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})))

	for _, tc := range []struct {
		name  string
		roots *x509.CertPool
		ok    bool
	}{
		{name: "trusted", roots: pool, ok: true},
		{name: "unknown authority", roots: x509.NewCertPool()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opened := make(chan *fakeTunnel, 1)
			core, logs := observer.New(zapcore.DebugLevel)
			clk := newFakeClock()
			before := len(prov.requests())

			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)

			go func() {
				done <- Run(ctx, Options{
					API: api, RootCAs: tc.roots, JoinToken: "v2:x", UUID: "u", UniqueToken: "{}", TalosVersion: "v1.13.9",
					Logger: zap.New(core), open: fakeOpener(opened), clock: clk,
				})
			}()

			if tc.ok {
				assert.Equal(t, netip.MustParsePrefix("fdae::a/64"), recv(t, opened, "the link").last().Address)
				assert.Len(t, prov.requests(), before+1)
			} else {
				// The failed attempt is logged, and retried after the backoff.
				clk.waitSleeping(t)
				assert.Len(t, prov.requests(), before)

				warned := logs.FilterMessage("error joining SideroLink").All()
				require.Len(t, warned, 1)
				assert.Contains(t, warned[0].ContextMap()["error"], "certificate")
			}

			cancel()
			require.NoError(t, recv(t, done, "Run's return"))
		})
	}
}
