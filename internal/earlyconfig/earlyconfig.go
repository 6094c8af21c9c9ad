// Package earlyconfig is Talos' talos.config.early kernel argument: machine configuration
// documents, zstd-compressed and base64-encoded, which Talos (v1.11 and later) applies
// before it fetches talos.config=. The provider puts a TrustedRootsConfig holding its CA
// there, so that Talos verifies the HTTPS it fetches its configuration over; Talos'
// stand-in in the lab reads it back the same way.
package earlyconfig

import (
	"bytes"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/blang/semver/v4"
	"github.com/klauspost/compress/zstd"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/types/security"
)

// Param is the kernel argument's name.
const Param = "talos.config.early"

// RootsName names the TrustedRootsConfig document that holds the provider's CA.
const RootsName = "anvil-provider"

// maxDecoded bounds what Decode inflates: a kernel line is a few KiB at most.
const maxDecoded = 64 << 10

// firstVersion is the first Talos that reads talos.config.early.
var firstVersion = semver.MustParse("1.11.0")

// Supported says whether Talos at version (v1.13.9, 1.13.9, v1.14.0-alpha.2) reads
// talos.config.early. An unparsable version is not: booting such a Talos with a TLS URL it
// could not verify would keep it from ever getting its configuration.
func Supported(version string) bool {
	v, err := semver.ParseTolerant(version)
	if err != nil {
		return false
	}

	// A pre-release of the first version has it too.
	v.Pre = nil

	return v.GTE(firstVersion)
}

// TrustedRoots is the argument's value for one TrustedRootsConfig document named
// RootsName that holds caPEM (PEM certificates).
func TrustedRoots(caPEM []byte) (string, error) {
	if len(bytes.TrimSpace(caPEM)) == 0 {
		return "", errors.New("no CA certificate to trust")
	}

	doc := security.NewTrustedRootsConfigV1Alpha1()
	doc.MetaName = RootsName
	doc.Certificates = string(caPEM)

	yaml, err := encoder.NewEncoder(doc, encoder.WithComments(encoder.CommentsDisabled)).Encode()
	if err != nil {
		return "", fmt.Errorf("error encoding the trusted roots document: %w", err)
	}

	return compress(yaml)
}

// compress is the argument's encoding of a configuration's YAML.
func compress(yaml []byte) (string, error) {
	var buf bytes.Buffer

	// Talos' kernel line is at most 2 KiB on x86: the best compression.
	zw, err := zstd.NewWriter(&buf, zstd.WithEncoderLevel(zstd.SpeedBestCompression))
	if err != nil {
		return "", fmt.Errorf("error making a zstd encoder: %w", err)
	}

	if _, err = zw.Write(yaml); err != nil {
		return "", fmt.Errorf("error compressing the configuration: %w", err)
	}

	if err = zw.Close(); err != nil {
		return "", fmt.Errorf("error compressing the configuration: %w", err)
	}

	return base64.StdEncoding.EncodeToString(buf.Bytes()), nil
}

// Roots reads the argument's value as Talos does and returns the certificates of its
// TrustedRootsConfig documents.
func Roots(value string) (*x509.CertPool, error) {
	z, err := base64.StdEncoding.DecodeString(strings.TrimSpace(value))
	if err != nil {
		return nil, fmt.Errorf("error decoding %s: %w", Param, err)
	}

	zr, err := zstd.NewReader(bytes.NewReader(z), zstd.WithDecoderMaxMemory(maxDecoded))
	if err != nil {
		return nil, fmt.Errorf("error making a zstd decoder: %w", err)
	}

	defer zr.Close()

	yaml, err := io.ReadAll(io.LimitReader(zr, maxDecoded+1))
	if err != nil {
		return nil, fmt.Errorf("error decompressing %s: %w", Param, err)
	}

	if len(yaml) > maxDecoded {
		return nil, fmt.Errorf("%s inflates to more than %d bytes", Param, maxDecoded)
	}

	cfg, err := configloader.NewFromBytes(yaml)
	if err != nil {
		return nil, fmt.Errorf("error loading %s: %w", Param, err)
	}

	pool := x509.NewCertPool()

	certs := cfg.TrustedRoots().ExtraTrustedRootCertificates()
	for _, pem := range certs {
		if !pool.AppendCertsFromPEM([]byte(pem)) {
			return nil, fmt.Errorf("%s holds a trusted root that is no PEM certificate", Param)
		}
	}

	if len(certs) == 0 {
		return nil, fmt.Errorf("%s holds no trusted roots", Param)
	}

	return pool, nil
}
