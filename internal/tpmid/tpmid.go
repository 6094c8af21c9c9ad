// Package tpmid is the contract of a machine's TPM identity between the agent and the
// provider: which endorsement key (EK) the agent shows (the TCG default EK template,
// which the provider rebuilds from the public key alone), what the attestation key (AK)
// must be, how the AK's name is computed, and how an EK is named to people (its
// fingerprint, "sha256:<hex>" of the public key's PKIX DER).
package tpmid

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/google/go-tpm/tpm2"
)

// FingerprintPrefix starts every EK fingerprint.
const FingerprintPrefix = "sha256:"

// Bounds on what a hello may carry: an RSA-2048 EK's PKIX DER is 294 bytes, a P-256
// one's 91; an AK's TPM2B_PUBLIC is at most a few hundred.
const (
	MaxEKPublic = 1 << 10
	MaxAKPublic = 1 << 10
)

// Fingerprint names an EK: "sha256:" and the lower-case hex SHA-256 of its PKIX DER.
func Fingerprint(ekDER []byte) string {
	sum := sha256.Sum256(ekDER)

	return FingerprintPrefix + hex.EncodeToString(sum[:])
}

// ParseFingerprint reads a fingerprint a person typed: "sha256:" and 64 hex digits (a
// colon between each byte, as some tools print them, is allowed). It returns it as
// Fingerprint writes it.
func ParseFingerprint(s string) (string, error) {
	rest, ok := strings.CutPrefix(strings.ToLower(strings.TrimSpace(s)), FingerprintPrefix)
	if !ok {
		return "", fmt.Errorf("EK fingerprint %q: want %s<64 hex digits>", s, FingerprintPrefix)
	}

	b, err := hex.DecodeString(strings.ReplaceAll(rest, ":", ""))
	if err != nil || len(b) != sha256.Size {
		return "", fmt.Errorf("EK fingerprint %q: want %s<64 hex digits>", s, FingerprintPrefix)
	}

	return FingerprintPrefix + hex.EncodeToString(b), nil
}

// EKTemplates are the EK templates an agent tries, in order: the TCG default RSA-2048
// (low range), then ECC NIST P-256 for a TPM without RSA.
var EKTemplates = []tpm2.TPMTPublic{tpm2.RSAEKTemplate, tpm2.ECCEKTemplate}

// EKPublic is the TPM public area of the EK whose public key is ekDER (PKIX DER), as the
// default template gives it: what the provider encrypts a credential to. A key the
// templates cannot give (another size or curve) is refused.
func EKPublic(ekDER []byte) (*tpm2.TPMTPublic, error) {
	if len(ekDER) > MaxEKPublic {
		return nil, fmt.Errorf("EK public key of %d bytes is too long", len(ekDER))
	}

	key, err := x509.ParsePKIXPublicKey(ekDER)
	if err != nil {
		return nil, fmt.Errorf("error parsing the EK public key: %w", err)
	}

	switch k := key.(type) {
	case *rsa.PublicKey:
		if k.N.BitLen() != 2048 || k.E != 65537 {
			return nil, fmt.Errorf("RSA EK of %d bits and exponent %d: want the default template's 2048 bits and 65537", k.N.BitLen(), k.E)
		}

		pub := tpm2.RSAEKTemplate
		pub.Unique = tpm2.NewTPMUPublicID(tpm2.TPMAlgRSA, &tpm2.TPM2BPublicKeyRSA{Buffer: k.N.FillBytes(make([]byte, 256))})

		return &pub, nil
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() {
			return nil, fmt.Errorf("ECC EK on %s: want the default template's P-256", k.Curve.Params().Name)
		}

		point, err := k.Bytes() // uncompressed: 0x04 || X || Y
		if err != nil {
			return nil, fmt.Errorf("error reading the EK's point: %w", err)
		}

		pub := tpm2.ECCEKTemplate
		pub.Unique = tpm2.NewTPMUPublicID(tpm2.TPMAlgECC, &tpm2.TPMSECCPoint{
			X: tpm2.TPM2BECCParameter{Buffer: point[1:33]},
			Y: tpm2.TPM2BECCParameter{Buffer: point[33:]},
		})

		return &pub, nil
	default:
		return nil, fmt.Errorf("EK public key of type %T: want RSA or ECDSA", key)
	}
}

// EKPublicDER is the PKIX DER of the public key in an EK's public area (what the agent
// sends, and what EKPublic reads back).
func EKPublicDER(pub *tpm2.TPMTPublic) ([]byte, error) {
	key, err := tpm2.Pub(*pub)
	if err != nil {
		return nil, fmt.Errorf("error reading the EK's public key: %w", err)
	}

	der, err := x509.MarshalPKIXPublicKey(key)
	if err != nil {
		return nil, fmt.Errorf("error marshaling the EK's public key: %w", err)
	}

	return der, nil
}

// AKTemplate is the AK an agent creates: an ECC P-256 restricted signing key (ECDSA
// SHA-256), fixed to its TPM and parent, its private part made in the TPM. ECC rather
// than RSA: a TPM makes it in milliseconds, where an RSA primary can take seconds.
var AKTemplate = tpm2.TPMTPublic{
	Type:    tpm2.TPMAlgECC,
	NameAlg: tpm2.TPMAlgSHA256,
	ObjectAttributes: tpm2.TPMAObject{
		FixedTPM:            true,
		FixedParent:         true,
		SensitiveDataOrigin: true,
		UserWithAuth:        true,
		NoDA:                true,
		Restricted:          true,
		SignEncrypt:         true,
	},
	Parameters: tpm2.NewTPMUPublicParms(tpm2.TPMAlgECC, &tpm2.TPMSECCParms{
		Symmetric: tpm2.TPMTSymDefObject{Algorithm: tpm2.TPMAlgNull},
		Scheme: tpm2.TPMTECCScheme{
			Scheme:  tpm2.TPMAlgECDSA,
			Details: tpm2.NewTPMUAsymScheme(tpm2.TPMAlgECDSA, &tpm2.TPMSSigSchemeECDSA{HashAlg: tpm2.TPMAlgSHA256}),
		},
		CurveID: tpm2.TPMECCNistP256,
		KDF:     tpm2.TPMTKDFScheme{Scheme: tpm2.TPMAlgNull},
	}),
	Unique: tpm2.NewTPMUPublicID(tpm2.TPMAlgECC, &tpm2.TPMSECCPoint{
		X: tpm2.TPM2BECCParameter{Buffer: make([]byte, 32)},
		Y: tpm2.TPM2BECCParameter{Buffer: make([]byte, 32)},
	}),
}

// AK reads an AK's TPM2B_PUBLIC (as a hello carries it), checks that it is a key the
// TPM keeps to itself and signs with only what it made (restricted, sign, not decrypt,
// fixedTPM, fixedParent, sensitiveDataOrigin, named with SHA-256 or stronger), and
// returns its TPM name: what a credential is made for.
func AK(akPublic []byte) ([]byte, error) {
	if len(akPublic) > MaxAKPublic {
		return nil, fmt.Errorf("AK public area of %d bytes is too long", len(akPublic))
	}

	b, err := tpm2.Unmarshal[tpm2.TPM2BPublic](akPublic)
	if err != nil {
		return nil, fmt.Errorf("error reading the AK's public area: %w", err)
	}

	pub, err := b.Contents()
	if err != nil {
		return nil, fmt.Errorf("error reading the AK's public area: %w", err)
	}

	if err = CheckAK(pub); err != nil {
		return nil, err
	}

	name, err := tpm2.ObjectName(pub)
	if err != nil {
		return nil, fmt.Errorf("error computing the AK's name: %w", err)
	}

	return name.Buffer, nil
}

// CheckAK checks an AK's attributes and algorithms (see AK).
func CheckAK(pub *tpm2.TPMTPublic) error {
	a := pub.ObjectAttributes

	var missing []string

	for _, attr := range []struct {
		name string
		ok   bool
	}{
		{"restricted", a.Restricted},
		{"sign", a.SignEncrypt},
		{"not decrypt", !a.Decrypt},
		{"fixedTPM", a.FixedTPM},
		{"fixedParent", a.FixedParent},
		{"sensitiveDataOrigin", a.SensitiveDataOrigin},
	} {
		if !attr.ok {
			missing = append(missing, attr.name)
		}
	}

	if len(missing) > 0 {
		return fmt.Errorf("the AK is not %s", strings.Join(missing, ", "))
	}

	switch pub.NameAlg {
	case tpm2.TPMAlgSHA256, tpm2.TPMAlgSHA384, tpm2.TPMAlgSHA512:
	default:
		return fmt.Errorf("the AK's name algorithm %v is not SHA-256 or stronger", pub.NameAlg)
	}

	switch pub.Type {
	case tpm2.TPMAlgRSA, tpm2.TPMAlgECC:
	default:
		return fmt.Errorf("the AK's type %v is not RSA or ECC", pub.Type)
	}

	return nil
}
