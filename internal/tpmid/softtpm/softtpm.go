// Package softtpm does in software what a machine's TPM does to prove its identity to
// the provider: it holds an endorsement key's private key and an attestation key, and
// recovers a credential's secret as TPM2_ActivateCredential does (the EK decrypts the
// seed, KDFa derives the integrity and storage keys, the HMAC over the credential and
// the AK's name is checked, AES-CFB decrypts the credential). For tests of the agent's
// session and the provider's checks: go-tpm's simulator needs cgo, and the agent and
// provider are built without.
package softtpm

import (
	"context"
	"crypto"
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/google/go-tpm/tpm2"

	agentv1 "github.com/anvil-metal/anvil/api/agent/v1"
	"github.com/anvil-metal/anvil/internal/tpmid"
)

// TPM is one machine's TPM, in memory.
type TPM struct {
	rsaEK *rsa.PrivateKey
	eccEK *ecdh.PrivateKey
	ekDER []byte
	ak    tpm2.TPMTPublic
	// AKOverride, when set, is sent as the AK's public area instead of the AK's own
	// (an agent that shows another key than the one it activates with).
	AKOverride []byte
}

// New returns a TPM with an RSA-2048 EK (the default template's kind).
func New() (*TPM, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, fmt.Errorf("error generating the EK: %w", err)
	}

	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("error marshaling the EK: %w", err)
	}

	return withAK(&TPM{rsaEK: key, ekDER: der})
}

// NewECC returns a TPM with an ECC P-256 EK.
func NewECC() (*TPM, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("error generating the EK: %w", err)
	}

	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("error marshaling the EK: %w", err)
	}

	ek, err := key.ECDH()
	if err != nil {
		return nil, fmt.Errorf("error converting the EK: %w", err)
	}

	return withAK(&TPM{eccEK: ek, ekDER: der})
}

// withAK gives t an AK of the template agents use, with a key of its own.
func withAK(t *TPM) (*TPM, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("error generating the AK: %w", err)
	}

	point, err := key.PublicKey.Bytes()
	if err != nil {
		return nil, fmt.Errorf("error reading the AK: %w", err)
	}

	t.ak = tpmid.AKTemplate
	t.ak.Unique = tpm2.NewTPMUPublicID(tpm2.TPMAlgECC, &tpm2.TPMSECCPoint{
		X: tpm2.TPM2BECCParameter{Buffer: point[1:33]},
		Y: tpm2.TPM2BECCParameter{Buffer: point[33:]},
	})

	return t, nil
}

// MustNew is New for tests: it panics on failure.
func MustNew() *TPM {
	t, err := New()
	if err != nil {
		panic(err)
	}

	return t
}

// SetAKAttributes changes the AK's attributes (an AK the provider must refuse).
func (t *TPM) SetAKAttributes(change func(*tpm2.TPMAObject)) { change(&t.ak.ObjectAttributes) }

// EKPublic is the EK's public key, PKIX DER.
func (t *TPM) EKPublic() []byte { return t.ekDER }

// Fingerprint is the EK's fingerprint.
func (t *TPM) Fingerprint() string { return tpmid.Fingerprint(t.ekDER) }

// AKPublic is the AK's TPM2B_PUBLIC, as a hello carries it.
func (t *TPM) AKPublic() []byte {
	if t.AKOverride != nil {
		return t.AKOverride
	}

	return tpm2.Marshal(tpm2.New2B(t.ak))
}

// Hello is what the agent's hello carries.
func (t *TPM) Hello() *agentv1.TPMIdentity {
	return &agentv1.TPMIdentity{EkPublic: t.EKPublic(), AkPublic: t.AKPublic()}
}

// Activate recovers the challenge's secret as TPM2_ActivateCredential would, for the
// AK this TPM holds (its own AK, whatever AKOverride shows).
func (t *TPM) Activate(_ context.Context, c *agentv1.Challenge) ([]byte, error) {
	name, err := tpm2.ObjectName(&t.ak)
	if err != nil {
		return nil, fmt.Errorf("error computing the AK's name: %w", err)
	}

	seed, err := t.seed(c.GetEncryptedSecret())
	if err != nil {
		return nil, err
	}

	blob := c.GetCredentialBlob()
	if len(blob) < 2 || len(blob) < 2+int(binary.BigEndian.Uint16(blob)) {
		return nil, errors.New("the credential blob is malformed")
	}

	integrity, encIdentity := blob[2:2+int(binary.BigEndian.Uint16(blob))], blob[2+int(binary.BigEndian.Uint16(blob)):]

	h := crypto.SHA256
	mac := hmac.New(h.New, tpm2.KDFa(h, seed, "INTEGRITY", nil, nil, h.Size()*8))
	mac.Write(encIdentity)
	mac.Write(name.Buffer)

	if !hmac.Equal(mac.Sum(nil), integrity) {
		return nil, errors.New("TPM_RC_INTEGRITY: the credential is not for this TPM's AK")
	}

	block, err := aes.NewCipher(tpm2.KDFa(h, seed, "STORAGE", name.Buffer, nil, 128))
	if err != nil {
		return nil, fmt.Errorf("error making the credential's cipher: %w", err)
	}

	plain := make([]byte, len(encIdentity))
	cipher.NewCFBDecrypter(block, make([]byte, block.BlockSize())).XORKeyStream(plain, encIdentity) //nolint:staticcheck // TPM 2.0 protects credentials with AES-CFB

	secret, err := tpm2.Unmarshal[tpm2.TPM2BDigest](plain)
	if err != nil {
		return nil, fmt.Errorf("error reading the credential: %w", err)
	}

	return secret.Buffer, nil
}

// seed decrypts the seed with the EK: RSA-OAEP (SHA-256, label "IDENTITY\0"), or ECDH
// with the ephemeral point and KDFe.
func (t *TPM) seed(encrypted []byte) ([]byte, error) {
	if t.rsaEK != nil {
		seed, err := rsa.DecryptOAEP(crypto.SHA256.New(), nil, t.rsaEK, encrypted, []byte("IDENTITY\x00"))
		if err != nil {
			return nil, fmt.Errorf("TPM_RC_VALUE: error decrypting the seed: %w", err)
		}

		return seed, nil
	}

	point, err := tpm2.Unmarshal[tpm2.TPMSECCPoint](encrypted)
	if err != nil {
		return nil, fmt.Errorf("error reading the ephemeral point: %w", err)
	}

	eph, err := ecdh.P256().NewPublicKey(append(append([]byte{4}, point.X.Buffer...), point.Y.Buffer...))
	if err != nil {
		return nil, fmt.Errorf("error reading the ephemeral point: %w", err)
	}

	z, err := t.eccEK.ECDH(eph)
	if err != nil {
		return nil, fmt.Errorf("error deriving the seed: %w", err)
	}

	ekX := t.eccEK.PublicKey().Bytes()[1:33]

	return tpm2.KDFe(crypto.SHA256, z, "IDENTITY", point.X.Buffer, ekX, crypto.SHA256.Size()*8), nil
}
