package etcdtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// certLife is how long the certificates are valid: long enough for a lab left running.
const certLife = 10 * 365 * 24 * time.Hour

// TLSFiles are the paths of PEM files: a certificate, its key and the CA that signed it.
type TLSFiles struct {
	CA, Cert, Key string
}

// pki is the cluster's certificates, as files under its directory: a CA, one certificate
// per member that serves clients and peers and is a peer's client certificate too, and one
// client certificate.
type pki struct {
	client  TLSFiles
	members []TLSFiles
}

// issuer signs certificates with a CA's key.
type issuer struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// writePKI makes the CA, a certificate for each of hosts (the member's IP) and the client
// certificate, and writes them under dir.
func writePKI(dir string, hosts []string) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("error creating %s: %w", dir, err)
	}

	ca, caPEM, err := newCA()
	if err != nil {
		return nil, err
	}

	caPath := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(caPath, caPEM, 0o644); err != nil {
		return nil, fmt.Errorf("error writing the CA: %w", err)
	}

	p := &pki{}

	for i, host := range hosts {
		tmpl, err := memberTemplate(i, host)
		if err != nil {
			return nil, err
		}

		files, err := ca.write(dir, fmt.Sprintf("member-%d", i), tmpl)
		if err != nil {
			return nil, err
		}

		files.CA = caPath
		p.members = append(p.members, files)
	}

	files, err := ca.write(dir, "client", &x509.Certificate{
		Subject:     pkix.Name{CommonName: "etcdtest-client"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return nil, err
	}

	files.CA = caPath
	p.client = files

	return p, nil
}

// memberTemplate is member i's certificate: a server to clients and peers, and a client
// to peers (--peer-client-cert-auth), for its host, 127.0.0.1 and localhost.
func memberTemplate(i int, host string) (*x509.Certificate, error) {
	ip := net.ParseIP(host)
	if ip == nil {
		return nil, fmt.Errorf("member %d's host %q is no IP address", i, host)
	}

	ips := []net.IP{ip}
	if !ip.Equal(net.IPv4(127, 0, 0, 1)) {
		ips = append(ips, net.IPv4(127, 0, 0, 1))
	}

	return &x509.Certificate{
		Subject:     pkix.Name{CommonName: memberName(i)},
		DNSNames:    []string{"localhost"},
		IPAddresses: ips,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}, nil
}

// newCA makes a self-signed CA and returns it with its certificate as PEM.
func newCA() (*issuer, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("error generating the CA's key: %w", err)
	}

	serial, err := serialNumber()
	if err != nil {
		return nil, nil, err
	}

	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "etcdtest CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(certLife),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}

	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("error signing the CA: %w", err)
	}

	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("error reading the CA back: %w", err)
	}

	return &issuer{cert: cert, key: key}, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// write signs tmpl for a new key and writes dir/name.crt and dir/name.key (0600).
func (ca *issuer) write(dir, name string, tmpl *x509.Certificate) (TLSFiles, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return TLSFiles{}, fmt.Errorf("error generating the key of %s: %w", name, err)
	}

	serial, err := serialNumber()
	if err != nil {
		return TLSFiles{}, err
	}

	now := time.Now()
	tmpl.SerialNumber = serial
	tmpl.NotBefore = now.Add(-time.Hour)
	tmpl.NotAfter = now.Add(certLife)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature

	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return TLSFiles{}, fmt.Errorf("error signing the certificate of %s: %w", name, err)
	}

	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return TLSFiles{}, fmt.Errorf("error encoding the key of %s: %w", name, err)
	}

	files := TLSFiles{Cert: filepath.Join(dir, name+".crt"), Key: filepath.Join(dir, name+".key")}

	if err := os.WriteFile(files.Cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return TLSFiles{}, fmt.Errorf("error writing the certificate of %s: %w", name, err)
	}

	if err := os.WriteFile(files.Key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return TLSFiles{}, fmt.Errorf("error writing the key of %s: %w", name, err)
	}

	return files, nil
}

func serialNumber() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("error drawing a serial number: %w", err)
	}

	return n, nil
}
