package redfish

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"sync"
	"time"
)

// ServeOptions say where a Server listens.
type ServeOptions struct {
	// HTTPSAddr is the HTTPS listen address, e.g. "127.0.0.1:0".
	HTTPSAddr string
	// HTTPAddr, if set, also serves plain HTTP (some lab clients and old BMCs).
	HTTPAddr string
	// Hosts are extra names and addresses the certificate is valid for; the listen
	// address, localhost, 127.0.0.1 and ::1 always are.
	Hosts []string
}

// Server serves a handler over HTTPS with a self-signed certificate made at start (as a
// BMC does out of the box), and optionally over HTTP.
type Server struct {
	// URL is https://host:port; HTTPURL is http://host:port, or empty.
	URL, HTTPURL string
	// Cert is the certificate, CertPEM the same in PEM, for clients that verify it.
	Cert    *x509.Certificate
	CertPEM []byte

	servers []*http.Server
	wg      sync.WaitGroup
	errs    chan error
	stop    context.CancelFunc
}

// Serve starts serving h; the servers stop when ctx ends or Close is called.
func Serve(ctx context.Context, h http.Handler, opts ServeOptions) (*Server, error) {
	lc := net.ListenConfig{}

	ln, err := lc.Listen(ctx, "tcp", opts.HTTPSAddr)
	if err != nil {
		return nil, fmt.Errorf("error listening on %s: %w", opts.HTTPSAddr, err)
	}

	host, _, _ := net.SplitHostPort(ln.Addr().String()) // a TCP listener's address

	cert, certPEM, err := selfSigned(append([]string{host, "localhost", "127.0.0.1", "::1"}, opts.Hosts...))
	if err != nil {
		ln.Close()

		return nil, err
	}

	s := &Server{
		URL:     "https://" + ln.Addr().String(),
		Cert:    cert.Leaf,
		CertPEM: certPEM,
		errs:    make(chan error, 2),
	}

	listeners := []net.Listener{tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})}

	if opts.HTTPAddr != "" {
		hln, err := lc.Listen(ctx, "tcp", opts.HTTPAddr)
		if err != nil {
			ln.Close()

			return nil, fmt.Errorf("error listening on %s: %w", opts.HTTPAddr, err)
		}

		s.HTTPURL = "http://" + hln.Addr().String()
		listeners = append(listeners, hln)
	}

	ctx, s.stop = context.WithCancel(ctx)

	for _, l := range listeners {
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
		s.servers = append(s.servers, srv)

		s.wg.Add(1)

		go func() {
			defer s.wg.Done()

			if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.errs <- fmt.Errorf("error serving on %s: %w", l.Addr(), err)
			}
		}()
	}

	// The owner of the servers' lifetime: ctx or Close ends them.
	s.wg.Add(1)

	go func() {
		defer s.wg.Done()

		<-ctx.Done()

		for _, srv := range s.servers {
			srv.Close()
		}
	}()

	return s, nil
}

// Close stops the servers and waits for them; it returns the first serving error.
func (s *Server) Close() error {
	s.stop()
	s.wg.Wait()

	select {
	case err := <-s.errs:
		return err
	default:
		return nil
	}
}

func selfSigned(hosts []string) (tls.Certificate, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("error generating the BMC key: %w", err)
	}

	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("error generating a serial number: %w", err)
	}

	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "anvil lab BMC", Organization: []string{"Anvil lab"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true, // self-signed: it is its own root for clients that trust it
	}

	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}

	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("error creating the BMC certificate: %w", err)
	}

	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("error parsing the BMC certificate: %w", err)
	}

	cert := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}

	return cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}
