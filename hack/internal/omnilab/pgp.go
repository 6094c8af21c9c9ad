package omnilab

import (
	"bytes"
	"crypto"
	"fmt"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
)

// NewStateKey makes the PGP key Omni encrypts its etcd state with (--private-key-source):
// an ed25519 key that only certifies, with a cv25519 encryption subkey, as the armored
// secret key. Omni names the key slot after the key's first identity, so it has one.
//
// It is made with ProtonMail's go-crypto, the OpenPGP library Omni itself reads the key
// with (through gopenpgp), already in Anvil's module graph through cosi-project/runtime:
// no gpg, no keyring, nothing outside the lab's directory.
func NewStateKey(name, email string) ([]byte, error) {
	cfg := &packet.Config{
		Algorithm:     packet.PubKeyAlgoEdDSA, // legacy EdDSA on ed25519, with an ECDH subkey
		Curve:         packet.Curve25519,
		DefaultHash:   crypto.SHA256,
		DefaultCipher: packet.CipherAES256,
	}

	e, err := openpgp.NewEntity(name, "Anvil lab Omni state", email, cfg)
	if err != nil {
		return nil, fmt.Errorf("error generating the PGP key: %w", err)
	}

	// A certify-only primary key, as Omni's documentation makes it with gpg: signing is
	// no part of its job. SerializePrivate signs the identities again with this.
	for _, id := range e.Identities {
		id.SelfSignature.FlagSign = false
	}

	var b bytes.Buffer

	w, err := armor.Encode(&b, openpgp.PrivateKeyType, nil)
	if err != nil {
		return nil, fmt.Errorf("error armoring the PGP key: %w", err)
	}

	if err := e.SerializePrivate(w, cfg); err != nil {
		return nil, fmt.Errorf("error encoding the PGP key: %w", err)
	}

	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("error armoring the PGP key: %w", err)
	}

	b.WriteByte('\n')

	return b.Bytes(), nil
}
