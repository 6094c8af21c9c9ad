// Package identity is the provider's side of a machine's TPM identity: it reads what an
// agent's hello shows of its TPM (the EK's public key and an AK), makes the challenge
// only that TPM can answer (TPM2_MakeCredential, in software, for the AK's name under
// the EK, around a secret fresh for each session) and checks the answer in constant
// time. Which EK a machine must show — the one recorded at its first registration, or
// bound at its acceptance — is Expected's rule.
package identity

import (
	"crypto/rand"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"

	"github.com/google/go-tpm/tpm2"

	agentv1 "github.com/anvil-metal/anvil/api/agent/v1"
	"github.com/anvil-metal/anvil/internal/tpmid"
)

// Kind is how a machine proves who it is: the values of its anvil.dev/identity label.
type Kind string

// Kinds of identity.
const (
	// KindTPM: the machine's agent proved it holds a TPM's EK (recorded, or bound).
	KindTPM Kind = "tpm"
	// KindNone: its agent showed no TPM; only its per-boot token binds it.
	KindNone Kind = "none"
)

// secretSize is the size of a challenge's secret: a SHA-256 digest's, the most a
// credential for an EK whose name algorithm is SHA-256 carries.
const secretSize = 32

// Claim is a TPM identity as an agent showed it, checked for form: an EK of the default
// template's kind and an AK fit to be named in a credential.
type Claim struct {
	// Fingerprint names the EK.
	Fingerprint string

	ek     tpm2.LabeledEncapsulationKey
	akName []byte
}

// ParseClaim reads the identity of a hello.
func ParseClaim(id *agentv1.TPMIdentity) (*Claim, error) {
	pub, err := tpmid.EKPublic(id.GetEkPublic())
	if err != nil {
		return nil, err
	}

	ek, err := tpm2.ImportEncapsulationKey(pub)
	if err != nil {
		return nil, fmt.Errorf("error reading the EK: %w", err)
	}

	name, err := tpmid.AK(id.GetAkPublic())
	if err != nil {
		return nil, err
	}

	return &Claim{Fingerprint: tpmid.Fingerprint(id.GetEkPublic()), ek: ek, akName: name}, nil
}

// Challenge is a credential made for a claim, and the secret it hides.
type Challenge struct {
	Message *agentv1.Challenge
	secret  []byte
}

// Challenge makes a credential for the claim's AK under its EK around a fresh secret.
func (c *Claim) Challenge() (*Challenge, error) { return c.challenge(rand.Reader) }

func (c *Claim) challenge(random io.Reader) (*Challenge, error) {
	secret := make([]byte, secretSize)
	if _, err := io.ReadFull(random, secret); err != nil {
		return nil, fmt.Errorf("error drawing the challenge's secret: %w", err)
	}

	blob, encrypted, err := tpm2.CreateCredential(random, c.ek, c.akName, secret)
	if err != nil {
		return nil, fmt.Errorf("error making the credential: %w", err)
	}

	return &Challenge{Message: &agentv1.Challenge{CredentialBlob: blob, EncryptedSecret: encrypted}, secret: secret}, nil
}

// ErrWrongAnswer is Verify's refusal: the answer is not the challenge's secret.
var ErrWrongAnswer = errors.New("the activation does not recover the challenge's secret")

// Verify checks an activation's secret against the challenge's, in constant time.
func (ch *Challenge) Verify(a *agentv1.Activation) error {
	if subtle.ConstantTimeCompare(a.GetSecret(), ch.secret) != 1 {
		return ErrWrongAnswer
	}

	return nil
}

// Expected is the EK fingerprint a machine's agent must prove: the one bound at its
// acceptance, else the one recorded at its first registration with a TPM; "" when
// neither is, and the agent may show any TPM, or none.
func Expected(bound, recorded string) string {
	if bound != "" {
		return bound
	}

	return recorded
}

// Of is the identity kind of a machine with the EK recorded and bound as given.
func Of(bound, recorded string) Kind {
	if Expected(bound, recorded) != "" {
		return KindTPM
	}

	return KindNone
}
