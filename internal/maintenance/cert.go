package maintenance

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"time"
)

// Validity of the certificate. Its key lives in memory for one Serve and clients
// skip verification (Omni, talosctl --insecure), so the dates matter only to a
// client that reads them; they start a day early because the agent's clock is
// whatever the firmware said at boot.
const (
	certBackdate = 24 * time.Hour
	certLifetime = 365 * 24 * time.Hour
)

// selfSigned returns a fresh ECDSA P-256 certificate for a TLS server at addrs,
// signed by its own key, as Talos' maintenance service presents one of its own
// making: clients have nothing to verify it against.
func selfSigned(addrs []netip.Addr, now time.Time) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("error generating the certificate key: %w", err)
	}

	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("error generating the certificate serial: %w", err)
	}

	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "metal-agent maintenance"},
		NotBefore:             now.Add(-certBackdate),
		NotAfter:              now.Add(certLifetime),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}

	for _, addr := range addrs {
		if addr.IsValid() && !addr.IsUnspecified() {
			tmpl.IPAddresses = append(tmpl.IPAddresses, net.IP(addr.Unmap().AsSlice()))
		}
	}

	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("error creating the certificate: %w", err)
	}

	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("error parsing the certificate: %w", err)
	}

	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

// tlsConfig serves cert and asks clients for no certificate: Omni sends none to a
// machine in maintenance and counts a demand for one as a machine in a bad state.
// TLS 1.3 at least, as Talos' API.
func tlsConfig(cert tls.Certificate) *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.NoClientCert,
		MinVersion:   tls.VersionTLS13,
	}
}

// listenerAddr returns the IP address lis is bound to, if it has one.
func listenerAddr(lis net.Listener) []netip.Addr {
	addr, ok := lis.Addr().(*net.TCPAddr)
	if !ok {
		return nil
	}

	return []netip.Addr{addr.AddrPort().Addr()}
}
