package main

import (
	"crypto/tls"
	stdx509 "crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
)

// certLifetime is how long the API's certificate is good for; it starts a day early, as
// the machine's clock is whatever the firmware said.
const certLifetime = 365 * 24 * time.Hour

// serverTLS returns installed Talos' API TLS from its machine config: a server
// certificate for the addresses listened on, signed by the config's machine CA, and
// client certificates required and checked against that CA (and any it accepts), as
// apid does: Omni resets the machine with the cluster's talosconfig.
func serverTLS(config []byte, now time.Time) (func([]netip.Addr) (*tls.Config, error), error) {
	cfg, err := configloader.NewFromBytes(config)
	if err != nil {
		return nil, fmt.Errorf("the configuration does not load: %w", err)
	}

	if cfg.Machine() == nil || cfg.Machine().Security() == nil {
		return nil, errors.New("the configuration has no machine section")
	}

	issuing := cfg.Machine().Security().IssuingCA()
	if issuing == nil || len(issuing.Crt) == 0 || len(issuing.Key) == 0 {
		// A worker's config: real Talos asks a control plane's trustd for its
		// certificate; the stand-in runs no trustd, so it can only be a control plane.
		return nil, errors.New("the configuration has no machine CA with its key (a worker's): the stand-in Talos runs no trustd to get a worker's API certificate from, so it can only be a control plane; real Talos (make talos) can be a worker")
	}

	ca, err := x509.NewCertificateAuthorityFromCertificateAndKey(issuing)
	if err != nil {
		return nil, fmt.Errorf("error reading the machine CA: %w", err)
	}

	clients := stdx509.NewCertPool()
	if !clients.AppendCertsFromPEM(issuing.Crt) {
		return nil, errors.New("the machine CA's certificate does not parse")
	}

	for _, accepted := range cfg.Machine().Security().AcceptedCAs() {
		clients.AppendCertsFromPEM(accepted.Crt)
	}

	return func(addrs []netip.Addr) (*tls.Config, error) {
		ips := make([]net.IP, 0, len(addrs))
		for _, a := range addrs {
			ips = append(ips, net.IP(a.Unmap().AsSlice()))
		}

		pair, err := x509.NewKeyPair(ca,
			x509.IPAddresses(ips),
			x509.CommonName("talos-standin"),
			x509.NotBefore(now.Add(-24*time.Hour)),
			x509.NotAfter(now.Add(certLifetime)),
			x509.KeyUsage(stdx509.KeyUsageDigitalSignature),
			x509.ExtKeyUsage([]stdx509.ExtKeyUsage{stdx509.ExtKeyUsageServerAuth}),
		)
		if err != nil {
			return nil, fmt.Errorf("error making the API's certificate: %w", err)
		}

		return &tls.Config{
			Certificates: []tls.Certificate{*pair.Certificate},
			ClientAuth:   tls.RequireAndVerifyClientCert,
			ClientCAs:    clients,
			MinVersion:   tls.VersionTLS13,
		}, nil
	}, nil
}
