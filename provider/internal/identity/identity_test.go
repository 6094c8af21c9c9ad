package identity_test

import (
	"bytes"
	"testing"

	"github.com/google/go-tpm/tpm2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	agentv1 "github.com/anvil-metal/anvil/api/agent/v1"
	"github.com/anvil-metal/anvil/internal/tpmid/softtpm"
	"github.com/anvil-metal/anvil/provider/internal/identity"
)

// TestChallenge: only the TPM that holds the EK and the AK named recovers the secret,
// and each challenge's secret is its own.
func TestChallenge(t *testing.T) {
	t.Parallel()

	for name, newTPM := range map[string]func() (*softtpm.TPM, error){"rsa": softtpm.New, "ecc": softtpm.NewECC} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()

			tpm, err := newTPM()
			require.NoError(t, err)

			claim, err := identity.ParseClaim(tpm.Hello())
			require.NoError(t, err)
			assert.Equal(t, tpm.Fingerprint(), claim.Fingerprint)

			first, err := claim.Challenge()
			require.NoError(t, err)

			secret, err := tpm.Activate(t.Context(), first.Message)
			require.NoError(t, err)
			require.NoError(t, first.Verify(&agentv1.Activation{Secret: secret}), "the TPM's answer")

			// A fresh secret each session: the first answer does not answer the second.
			second, err := claim.Challenge()
			require.NoError(t, err)
			assert.ErrorIs(t, second.Verify(&agentv1.Activation{Secret: secret}), identity.ErrWrongAnswer, "a replayed answer")

			again, err := tpm.Activate(t.Context(), second.Message)
			require.NoError(t, err)
			assert.False(t, bytes.Equal(secret, again))
			require.NoError(t, second.Verify(&agentv1.Activation{Secret: again}))

			for what, answer := range map[string][]byte{"none": nil, "short": secret[:16], "long": append(bytes.Clone(again), 0)} {
				assert.ErrorIs(t, second.Verify(&agentv1.Activation{Secret: answer}), identity.ErrWrongAnswer, what)
			}
		})
	}
}

// TestChallengeOtherTPM: a TPM that does not hold the EK, or holds it but not the AK
// named, recovers nothing.
func TestChallengeOtherTPM(t *testing.T) {
	t.Parallel()

	real, thief := softtpm.MustNew(), softtpm.MustNew()

	// The thief shows the real machine's EK with its own AK: it cannot decrypt the seed.
	claim, err := identity.ParseClaim(&agentv1.TPMIdentity{EkPublic: real.EKPublic(), AkPublic: thief.AKPublic()})
	require.NoError(t, err)

	ch, err := claim.Challenge()
	require.NoError(t, err)

	_, err = thief.Activate(t.Context(), ch.Message)
	assert.Error(t, err)

	// The real TPM, asked for a credential named for another AK than its own: refused.
	real.AKOverride = thief.AKPublic()
	claim, err = identity.ParseClaim(real.Hello())
	require.NoError(t, err)

	ch, err = claim.Challenge()
	require.NoError(t, err)

	_, err = real.Activate(t.Context(), ch.Message)
	assert.ErrorContains(t, err, "INTEGRITY")
}

// TestParseClaim: an identity is checked for form before a challenge is made for it.
func TestParseClaim(t *testing.T) {
	t.Parallel()

	tpm := softtpm.MustNew()

	restricted := softtpm.MustNew()
	restricted.SetAKAttributes(func(a *tpm2.TPMAObject) { a.Restricted = false })

	for name, id := range map[string]*agentv1.TPMIdentity{
		"no EK":           {AkPublic: tpm.AKPublic()},
		"no AK":           {EkPublic: tpm.EKPublic()},
		"garbage EK":      {EkPublic: []byte("x"), AkPublic: tpm.AKPublic()},
		"unrestricted AK": restricted.Hello(),
	} {
		_, err := identity.ParseClaim(id)
		assert.Error(t, err, name)
	}
}

func TestExpected(t *testing.T) {
	t.Parallel()

	assert.Equal(t, "b", identity.Expected("b", "r"), "the bound EK wins")
	assert.Equal(t, "r", identity.Expected("", "r"), "else the recorded one")
	assert.Empty(t, identity.Expected("", ""))
	assert.Equal(t, identity.KindTPM, identity.Of("", "r"))
	assert.Equal(t, identity.KindTPM, identity.Of("b", ""))
	assert.Equal(t, identity.KindNone, identity.Of("", ""))
}
