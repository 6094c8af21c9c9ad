package tpmid_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/google/go-tpm/tpm2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/internal/tpmid"
	"github.com/anvil-metal/anvil/internal/tpmid/softtpm"
)

func TestFingerprint(t *testing.T) {
	t.Parallel()

	fp := tpmid.Fingerprint([]byte("ek"))
	// sha256("ek"), as sha256sum prints it.
	assert.Equal(t, "sha256:"+sha256Hex("ek"), fp)
	assert.Len(t, fp, len("sha256:")+64)

	for in, want := range map[string]string{
		fp:                                      fp,
		strings.ToUpper(fp):                     fp,
		" " + fp + "\n":                         fp,
		"sha256:" + colons(fp[len("sha256:"):]): fp,
	} {
		got, err := tpmid.ParseFingerprint(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}

	for _, bad := range []string{"", fp[len("sha256:"):], "sha1:" + fp[len("sha256:"):], fp[:len(fp)-2], fp + "00", "sha256:" + strings.Repeat("zz", 32)} {
		_, err := tpmid.ParseFingerprint(bad)
		assert.Error(t, err, bad)
	}
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))

	return hex.EncodeToString(sum[:])
}

func colons(h string) string {
	var parts []string
	for i := 0; i < len(h); i += 2 {
		parts = append(parts, h[i:i+2])
	}

	return strings.Join(parts, ":")
}

// TestEKPublic: the provider rebuilds the EK's public area from the PKIX key the agent
// sends, for the default templates' kinds only.
func TestEKPublic(t *testing.T) {
	t.Parallel()

	for name, tpm := range map[string]func() (*softtpm.TPM, error){"rsa": softtpm.New, "ecc": softtpm.NewECC} {
		soft, err := tpm()
		require.NoError(t, err, name)

		pub, err := tpmid.EKPublic(soft.EKPublic())
		require.NoError(t, err, name)
		assert.True(t, pub.ObjectAttributes.Restricted && pub.ObjectAttributes.Decrypt, name)

		der, err := tpmid.EKPublicDER(pub)
		require.NoError(t, err, name)
		assert.Equal(t, soft.EKPublic(), der, "%s: the public area gives back the agent's key", name)
	}

	small, err := rsa.GenerateKey(rand.Reader, 1024)
	require.NoError(t, err)

	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	require.NoError(t, err)

	for name, key := range map[string]any{"rsa-1024": &small.PublicKey, "p-384": &p384.PublicKey} {
		der, err := x509.MarshalPKIXPublicKey(key)
		require.NoError(t, err)

		_, err = tpmid.EKPublic(der)
		assert.Error(t, err, name)
	}

	_, err = tpmid.EKPublic([]byte("not DER"))
	assert.Error(t, err)

	_, err = tpmid.EKPublic(make([]byte, tpmid.MaxEKPublic+1))
	assert.ErrorContains(t, err, "too long")
}

// TestAK: an AK is named only if the TPM keeps it to itself and it signs only what the
// TPM made.
func TestAK(t *testing.T) {
	t.Parallel()

	soft := softtpm.MustNew()

	name, err := tpmid.AK(soft.AKPublic())
	require.NoError(t, err)

	want, err := tpm2.ObjectName(&tpmid.AKTemplate)
	require.NoError(t, err)
	assert.Len(t, name, len(want.Buffer))

	for attr, change := range map[string]func(*tpm2.TPMAObject){
		"restricted":          func(a *tpm2.TPMAObject) { a.Restricted = false },
		"sign":                func(a *tpm2.TPMAObject) { a.SignEncrypt = false },
		"not decrypt":         func(a *tpm2.TPMAObject) { a.Decrypt = true },
		"fixedTPM":            func(a *tpm2.TPMAObject) { a.FixedTPM = false },
		"fixedParent":         func(a *tpm2.TPMAObject) { a.FixedParent = false },
		"sensitiveDataOrigin": func(a *tpm2.TPMAObject) { a.SensitiveDataOrigin = false },
	} {
		bad := softtpm.MustNew()
		bad.SetAKAttributes(change)

		_, err := tpmid.AK(bad.AKPublic())
		assert.ErrorContains(t, err, attr, attr)
	}

	weak := tpmid.AKTemplate
	weak.NameAlg = tpm2.TPMAlgSHA1
	_, err = tpmid.AK(tpm2.Marshal(tpm2.New2B(weak)))
	assert.ErrorContains(t, err, "SHA-256")

	_, err = tpmid.AK([]byte{0, 9, 1})
	assert.Error(t, err)

	_, err = tpmid.AK(make([]byte, tpmid.MaxAKPublic+1))
	assert.ErrorContains(t, err, "too long")
}
