package token_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/internal/token"
)

func TestSignVerify(t *testing.T) {
	t.Parallel()

	key := []byte("0123456789abcdef0123456789abcdef")
	issued := time.Unix(1700000000, 123456789)

	for _, c := range []token.Claims{
		{Kind: token.KindAgent, MachineID: "4c4c4544-0000-1000-8000-000000000001", Issued: issued},
		{Kind: token.KindMetadata, MachineID: "m1", Binding: "alloc-1"},
		{Kind: token.KindMetadata},
	} {
		tok := token.Sign(key, c)
		got, err := token.Verify(key, tok)
		require.NoError(t, err)
		require.Equal(t, c.Kind, got.Kind)
		require.Equal(t, c.MachineID, got.MachineID)
		require.Equal(t, c.Binding, got.Binding)
		require.True(t, c.Issued.Equal(got.Issued))
	}
}

func TestVerifyRejects(t *testing.T) {
	t.Parallel()

	key := []byte("0123456789abcdef0123456789abcdef")
	good := token.Sign(key, token.Claims{Kind: token.KindAgent, MachineID: "m1", Issued: time.Unix(1700000000, 0)})
	v, p, _ := strings.Cut(strings.TrimPrefix(good, "v1."), ".")

	// A character inside the signature, changed for another: the last one carries bits
	// the decoder ignores, and "AA" could be what was there.
	flipped := []byte(good)
	if i := len(flipped) - 10; flipped[i] == 'A' {
		flipped[i] = 'B'
	} else {
		flipped[i] = 'A'
	}

	for name, tok := range map[string]string{
		"empty":         "",
		"other key":     token.Sign([]byte("another key another key another!"), token.Claims{Kind: token.KindAgent, MachineID: "m1"}),
		"no signature":  "v1." + v,
		"bad version":   "v2." + v + "." + p,
		"swapped parts": "v1." + p + "." + v,
		"flipped byte":  string(flipped),
		"oversized":     strings.Repeat("a", token.MaxLength+1),
		"not base64":    "v1.!!!.???",
	} {
		_, err := token.Verify(key, tok)
		require.ErrorIs(t, err, token.ErrInvalid, name)
	}
}

func FuzzVerify(f *testing.F) {
	key := []byte("0123456789abcdef0123456789abcdef")
	f.Add(token.Sign(key, token.Claims{Kind: token.KindAgent, MachineID: "m1", Issued: time.Now()}))
	f.Add("v1..")

	f.Fuzz(func(t *testing.T, tok string) {
		c, err := token.Verify(key, tok)
		if err == nil && token.Sign(key, c) != tok {
			t.Fatalf("token %q verified but does not re-sign to itself", tok)
		}
	})
}
