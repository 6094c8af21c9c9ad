package resources

import (
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/cosi-project/runtime/pkg/state/impl/store/encryption"
)

const (
	keyFile = "provider.key"
	keySize = 32
)

// Keys are the provider's secrets, all derived from one master key kept in the state
// directory (mode 0600): the key that encrypts the store at rest and the key that signs
// boot and metadata tokens.
type Keys struct {
	storage []byte
	tokens  []byte
	bmc     []byte
}

// TokenKey returns the key that signs tokens.
func (k *Keys) TokenKey() []byte { return k.tokens }

// BMCPassword is the password the provider has agents set on a machine's BMC: derived
// from the master key and the machine ID, so the order that carries it is the same
// every time it is sent (orders are a pure function of the state), yet secret and
// different per machine. 16 characters of [A-Za-z0-9] (~95 bits): IPMI 2.0 allows 20
// bytes, and some BMCs (OpenIPMI's simulator among them) only 16.
func (k *Keys) BMCPassword(machineID string) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

	mac := hmac.New(sha256.New, k.bmc)
	mac.Write([]byte(machineID))
	sum := mac.Sum(nil)

	out := make([]byte, 16)
	for i := range out {
		// 256 mod 62 = 8: a bias of under 4% on 8 characters, far from mattering
		// at 95 bits.
		out[i] = alphabet[int(sum[i])%len(alphabet)]
	}

	return string(out)
}

// LoadKeys reads the master key from dir, generating it on first start.
func LoadKeys(dir string) (*Keys, error) {
	path := filepath.Join(dir, keyFile)

	master, err := os.ReadFile(path)

	switch {
	case errors.Is(err, fs.ErrNotExist):
		master = make([]byte, keySize)
		if _, err = rand.Read(master); err != nil {
			return nil, fmt.Errorf("error generating the provider key: %w", err)
		}

		if err = writeFileSync(path, master, 0o600); err != nil {
			return nil, fmt.Errorf("error writing the provider key: %w", err)
		}
	case err != nil:
		return nil, fmt.Errorf("error reading the provider key: %w", err)
	case len(master) != keySize:
		return nil, fmt.Errorf("provider key %s has %d bytes, want %d", path, len(master), keySize)
	}

	return DeriveKeys(master)
}

// DeriveKeys derives the provider's keys from a master key.
func DeriveKeys(master []byte) (*Keys, error) {
	storage, err := hkdf.Key(sha256.New, master, nil, "anvil storage", keySize)
	if err != nil {
		return nil, fmt.Errorf("error deriving the storage key: %w", err)
	}

	tokens, err := hkdf.Key(sha256.New, master, nil, "anvil tokens", keySize)
	if err != nil {
		return nil, fmt.Errorf("error deriving the token key: %w", err)
	}

	bmc, err := hkdf.Key(sha256.New, master, nil, "anvil bmc passwords", keySize)
	if err != nil {
		return nil, fmt.Errorf("error deriving the BMC password key: %w", err)
	}

	return &Keys{storage: storage, tokens: tokens, bmc: bmc}, nil
}

func writeFileSync(path string, data []byte, perm os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}

	if _, err = f.Write(data); err != nil {
		f.Close()

		return err
	}

	if err = f.Sync(); err != nil {
		f.Close()

		return err
	}

	return f.Close()
}

// Seal encrypts b with the storage key (AES-GCM, as the state's resources are): for the
// secrets replicas share through etcd beside the state.
func (k *Keys) Seal(b []byte) ([]byte, error) { return k.cipher().Encrypt(b) }

// Unseal decrypts what Seal encrypted; it fails for anything else, or another key's.
func (k *Keys) Unseal(b []byte) ([]byte, error) { return k.cipher().Decrypt(b) }

func (k *Keys) cipher() *encryption.Cipher {
	return encryption.NewCipher(encryption.KeyProviderFunc(func() ([]byte, error) { return k.storage, nil }))
}
