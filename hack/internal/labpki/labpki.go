// Package labpki is the lab's certificate authority: a CA made for one lab run, and
// server certificates it issues for the lab's addresses, so that the lab's TLS services
// (Omni's API) are verified by their clients exactly as in production, by trusting the
// CA's certificate file rather than skipping verification.
package labpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"time"
)

// Validity of what the CA issues, and of the CA itself: a lab lives for hours; a year
// keeps a long-running lab clear of expiry without making the certificates look like
// anything but the lab's.
const Validity = 365 * 24 * time.Hour

// clockSkew backdates NotBefore, so a certificate is valid at once on a machine whose
// clock is a little behind the lab host's (the lab's QEMU guests, which set their clocks
// from the host's RTC at boot).
const clockSkew = 5 * time.Minute

// CA is a certificate authority with its key in memory.
type CA struct {
	Cert *x509.Certificate
	// CertPEM is Cert, PEM-encoded: what clients trust.
	CertPEM []byte

	key *ecdsa.PrivateKey
}

// NewCA makes a CA named name (its subject's common name).
func NewCA(name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("error generating the CA key: %w", err)
	}

	serial, err := newSerial()
	if err != nil {
		return nil, err
	}

	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name, Organization: []string{"Anvil lab"}},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(Validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}

	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("error signing the CA certificate: %w", err)
	}

	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("error reading back the CA certificate: %w", err)
	}

	return &CA{Cert: cert, CertPEM: pemBlock("CERTIFICATE", der), key: key}, nil
}

// Pair is a certificate and its key, PEM-encoded.
type Pair struct {
	CertPEM, KeyPEM []byte
}

// IssueServer issues a TLS server certificate for hosts: IP addresses become IP SANs,
// anything else a DNS SAN. The first host is also the common name.
func (ca *CA) IssueServer(hosts ...string) (*Pair, error) {
	if len(hosts) == 0 {
		return nil, errors.New("a server certificate needs at least one host")
	}

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("error generating the server key: %w", err)
	}

	serial, err := newSerial()
	if err != nil {
		return nil, err
	}

	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: hosts[0], Organization: []string{"Anvil lab"}},
		NotBefore:    now.Add(-clockSkew),
		NotAfter:     now.Add(Validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}

	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}

	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, fmt.Errorf("error signing the server certificate for %v: %w", hosts, err)
	}

	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("error encoding the server key: %w", err)
	}

	return &Pair{CertPEM: pemBlock("CERTIFICATE", der), KeyPEM: pemBlock("PRIVATE KEY", keyDER)}, nil
}

// Write writes the pair to certFile and keyFile; the key is readable by its owner only.
func (p *Pair) Write(certFile, keyFile string) error {
	if err := os.WriteFile(certFile, p.CertPEM, 0o644); err != nil {
		return fmt.Errorf("error writing %s: %w", certFile, err)
	}

	if err := os.WriteFile(keyFile, p.KeyPEM, 0o600); err != nil {
		return fmt.Errorf("error writing %s: %w", keyFile, err)
	}

	return nil
}

// Pool is a certificate pool holding only the CA in the PEM file caFile: what a client
// of a lab service trusts.
func Pool(caFile string) (*x509.CertPool, error) {
	b, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("error reading the lab CA: %w", err)
	}

	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("no certificate in %s", caFile)
	}

	return pool, nil
}

func newSerial() (*big.Int, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("error generating a serial number: %w", err)
	}

	return serial, nil
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}
