// Package pki keeps the provider's certificate authority: generated into the state
// directory on first start, it signs the provider's serving certificates (control API
// over TCP, later the agent API) and the client certificate that anvilctl presents over
// TCP.
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Files in the state directory.
const (
	CACertFile     = "ca.crt"
	CAKeyFile      = "ca.key"
	AdminCertFile  = "admin.crt"
	AdminKeyFile   = "admin.key"
	caValidity     = 10 * 365 * 24 * time.Hour
	leafValidity   = 365 * 24 * time.Hour
	adminSubject   = "anvil-admin"
	clockSkewGrace = time.Hour
)

// Files are the authority's files in the state directory, all of them: what the replicas
// of a site share.
func Files() []string { return []string{CACertFile, CAKeyFile, AdminCertFile, AdminKeyFile} }

// Authority is the provider's CA.
type Authority struct {
	cert *x509.Certificate
	der  []byte
	key  *ecdsa.PrivateKey
}

// Load reads the CA from dir, generating it (and an admin client certificate beside it)
// on first start.
func Load(dir string) (*Authority, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, CACertFile))
	if errors.Is(err, fs.ErrNotExist) {
		return create(dir)
	}

	if err != nil {
		return nil, fmt.Errorf("error reading the CA certificate: %w", err)
	}

	keyPEM, err := os.ReadFile(filepath.Join(dir, CAKeyFile))
	if err != nil {
		return nil, fmt.Errorf("error reading the CA key: %w", err)
	}

	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("error loading the CA: %w", err)
	}

	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("CA key in %s is %T, want ECDSA", dir, pair.PrivateKey)
	}

	return &Authority{cert: pair.Leaf, der: pair.Certificate[0], key: key}, nil
}

func create(dir string) (*Authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("error generating the CA key: %w", err)
	}

	now := time.Now()
	template := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "anvil provider CA"},
		NotBefore:             now.Add(-clockSkewGrace),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}

	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("error creating the CA certificate: %w", err)
	}

	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}

	ca := &Authority{cert: cert, der: der, key: key}

	// The admin pair first: a CA on disk without it would never get one.
	adminCert, adminKey, err := ca.issue(adminSubject, nil, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return nil, err
	}

	for name, data := range map[string][]byte{
		AdminKeyFile:  adminKey,
		AdminCertFile: adminCert,
		CAKeyFile:     encodeKey(key),
		CACertFile:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
	} {
		if err = os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return nil, fmt.Errorf("error writing %s: %w", name, err)
		}
	}

	return ca, nil
}

// Fingerprint is the SHA-256 of the CA certificate, hex: what an agent pins.
func (ca *Authority) Fingerprint() string {
	sum := sha256.Sum256(ca.der)

	return hex.EncodeToString(sum[:])
}

// CertPEM is the CA certificate, PEM: what Talos is given to trust (talos.config.early).
func (ca *Authority) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.der})
}

// Pool returns a pool holding the CA.
func (ca *Authority) Pool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)

	return pool
}

// ServerCertificate issues a serving certificate for the given IP addresses and names,
// with the CA in its chain so that a client pinning the CA's fingerprint finds it.
func (ca *Authority) ServerCertificate(hosts []string) (tls.Certificate, error) {
	certPEM, keyPEM, err := ca.issue("anvil provider", hosts, x509.ExtKeyUsageServerAuth)
	if err != nil {
		return tls.Certificate{}, err
	}

	chain := append(certPEM, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.der})...)

	return tls.X509KeyPair(chain, keyPEM)
}

// ServerTLS returns a server TLS configuration for the given hosts, without client
// certificates: who may talk is the service's business (agents present tokens).
func (ca *Authority) ServerTLS(hosts []string) (*tls.Config, error) {
	cert, err := ca.ServerCertificate(hosts)
	if err != nil {
		return nil, err
	}

	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}, nil
}

// MutualTLS returns a server TLS configuration that demands a client certificate issued
// by the CA.
func (ca *Authority) MutualTLS(hosts []string) (*tls.Config, error) {
	cert, err := ca.ServerCertificate(hosts)
	if err != nil {
		return nil, err
	}

	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    ca.Pool(),
	}, nil
}

func (ca *Authority) issue(cn string, hosts []string, usage x509.ExtKeyUsage) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("error generating a key: %w", err)
	}

	now := time.Now()
	template := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    now.Add(-clockSkewGrace),
		NotAfter:     now.Add(leafValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}

	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			template.IPAddresses = append(template.IPAddresses, ip)
		} else {
			template.DNSNames = append(template.DNSNames, h)
		}
	}

	der, err := x509.CreateCertificate(rand.Reader, template, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("error issuing a certificate for %s: %w", cn, err)
	}

	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), encodeKey(key), nil
}

func encodeKey(key *ecdsa.PrivateKey) []byte {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		panic(err) // a P-256 key always marshals
	}

	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}

	return n
}
