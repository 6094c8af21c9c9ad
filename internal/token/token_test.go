package token_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"strings"
	"sync"
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

// TestSignerSignsAsBefore: tokens the provider signed before the Signer (machines carry
// metadata tokens in their kernel line across provider restarts) verify, and the same
// claims sign to the same bytes, by the Signer and by Sign.
func TestSignerSignsAsBefore(t *testing.T) {
	t.Parallel()

	key := []byte("0123456789abcdef0123456789abcdef")
	s := token.NewSigner(key)

	for _, tc := range []struct {
		claims token.Claims
		want   string
	}{
		{
			token.Claims{Kind: token.KindAgent, MachineID: "4c4c4544-0000-1000-8000-000000000001", Issued: time.Unix(1700000000, 123456789)},
			"v1.YReXnP49hc0VACQ0YzRjNDU0NC0wMDAwLTEwMDAtODAwMC0wMDAwMDAwMDAwMDEAAA.TxnY0HFxKfCTGUHaQ9yifH1pWJrEw_u5EVsjf_50gVI",
		},
		{
			token.Claims{Kind: token.KindAgent, MachineID: "m1", Issued: time.Unix(0, 1)},
			"v1.YQAAAAAAAAABAAJtMQAA.5ypLQXgdIQA_aYR-_Yq17zyLNonfEmE9CA5Cg1rEHHA",
		},
		{
			token.Claims{Kind: token.KindAgent, MachineID: "m1", Issued: time.Unix(-1, 0)},
			"v1.Yf_____EZTYAAAJtMQAA.IwRKngarc8g9nuvBybCtxxZRvxNoAiHxgayi9Or0FYA",
		},
		{
			token.Claims{Kind: token.KindMetadata, MachineID: "m1", Binding: "alloc-1"},
			"v1.bQAAAAAAAAAAAAJtMQAHYWxsb2MtMQ.yiTWMpfz08mppkmm1NdcyyLar8UgAraXVsCIgVxZgao",
		},
		{
			token.Claims{Kind: token.KindMetadata},
			"v1.bQAAAAAAAAAAAAAAAA.v9KEVXjaMvyOd1JkpYVNFIYjXdvaHMIa5eA90p6J4UY",
		},
		{
			token.Claims{Kind: 'z', MachineID: "ü/ß\x00", Binding: strings.Repeat("b", 300)},
			"v1.egAAAAAAAAAAAAbDvC_DnwABLG" + strings.Repeat("JiYm", 99) + "JiYg.rOwKjGLamAzQBAVE3fq3PA5NZlaon1gkS1pPpDp1GFo",
		},
	} {
		// Twice each: the second from a Signer that has signed before.
		for range 2 {
			require.Equal(t, tc.want, s.Sign(tc.claims), tc.claims)
		}

		require.Equal(t, tc.want, token.Sign(key, tc.claims), tc.claims)

		if len(tc.want) > token.MaxLength {
			// Signed, but past what Verify accepts.
			_, err := s.Verify(tc.want)
			require.ErrorIs(t, err, token.ErrInvalid)

			continue
		}

		got, err := s.Verify(tc.want)
		require.NoError(t, err, tc.claims)

		old, err := token.Verify(key, tc.want)
		require.NoError(t, err, tc.claims)
		require.Equal(t, old, got)
		require.Equal(t, tc.claims.Kind, got.Kind)
		require.Equal(t, tc.claims.MachineID, got.MachineID)
		require.Equal(t, tc.claims.Binding, got.Binding)
		require.True(t, tc.claims.Issued.Equal(got.Issued))
	}
}

// TestSignerConcurrent: goroutines sharing a Signer each get their own tokens right (run
// with -race).
func TestSignerConcurrent(t *testing.T) {
	t.Parallel()

	key := []byte("0123456789abcdef0123456789abcdef")
	s := token.NewSigner(key)

	var wg sync.WaitGroup

	errs := make(chan string, 8)

	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				c := token.Claims{Kind: token.KindMetadata, MachineID: strings.Repeat("m", g+1), Binding: strings.Repeat("a", i%40)}

				tok := s.Sign(c)
				if tok != token.Sign(key, c) {
					errs <- "signed other bytes for " + c.MachineID + "/" + c.Binding

					return
				}

				if got, err := s.Verify(tok); err != nil || got != c {
					errs <- "did not verify " + tok

					return
				}
			}
		})
	}

	wg.Wait()
	close(errs)

	for msg := range errs {
		t.Error(msg)
	}
}

func TestNewSignerCopiesTheKey(t *testing.T) {
	t.Parallel()

	key := []byte("0123456789abcdef0123456789abcdef")
	c := token.Claims{Kind: token.KindMetadata, MachineID: "m1", Binding: "a1"}
	want := token.Sign(key, c)

	s := token.NewSigner(key)
	copy(key, "another key another key another!")

	require.Equal(t, want, s.Sign(c))
}

func TestVerifyRejects(t *testing.T) {
	t.Parallel()

	key := []byte("0123456789abcdef0123456789abcdef")
	signer := token.NewSigner(key)
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
		"short mac":     good[:len(good)-4],
		"long mac":      good + "AAAA",
		"three parts":   good + ".AAAA",
		"padded":        "v1." + v + "=." + p,
		// Signed with the key, but not claims Sign writes.
		"short payload": forge(key, "a\x00\x00\x00"),
		"short string":  forge(key, "a\x00\x00\x00\x00\x00\x00\x00\x00\x00\x05m1"),
		"no binding":    forge(key, "a\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02m1"),
		"trailing byte": forge(key, "a\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02m1\x00\x00\x00"),
	} {
		_, err := token.Verify(key, tok)
		require.ErrorIs(t, err, token.ErrInvalid, name)

		// A Signer that has verified before, and one that has not.
		for _, s := range []*token.Signer{signer, token.NewSigner(key)} {
			got, err := s.Verify(tok)
			require.ErrorIs(t, err, token.ErrInvalid, name)
			require.Zero(t, got, name)
		}
	}

	for _, s := range []*token.Signer{signer, token.NewSigner(key)} {
		_, err := s.Verify(good)
		require.NoError(t, err, "a good token after the bad ones")
	}

	// forge signs as Sign does: the forged tokens above fail for their claims alone.
	require.Equal(t, token.Sign(key, token.Claims{Kind: token.KindAgent, MachineID: "m1"}),
		forge(key, "a\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02m1\x00\x00"))
}

// forge returns a token for any payload, signed with the key.
func forge(key []byte, payload string) string {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(payload))

	enc := base64.RawURLEncoding

	return "v1." + enc.EncodeToString([]byte(payload)) + "." + enc.EncodeToString(h.Sum(nil))
}

func FuzzVerify(f *testing.F) {
	key := []byte("0123456789abcdef0123456789abcdef")
	f.Add(token.Sign(key, token.Claims{Kind: token.KindAgent, MachineID: "m1", Issued: time.Now()}))
	f.Add("v1..")

	s := token.NewSigner(key)

	f.Fuzz(func(t *testing.T, tok string) {
		c, err := token.Verify(key, tok)
		if err == nil && token.Sign(key, c) != tok {
			t.Fatalf("token %q verified but does not re-sign to itself", tok)
		}

		sc, serr := s.Verify(tok)
		if (serr == nil) != (err == nil) || sc != c {
			t.Fatalf("token %q: the Signer says %v, %v; Verify %v, %v", tok, sc, serr, c, err)
		}

		if err == nil && s.Sign(c) != tok {
			t.Fatalf("token %q verified but the Signer does not re-sign it to itself", tok)
		}
	})
}

// BenchmarkSign and BenchmarkVerify: a token keyed per call, and by a Signer.
func BenchmarkSign(b *testing.B) {
	key := []byte("0123456789abcdef0123456789abcdef")
	c := token.Claims{Kind: token.KindAgent, MachineID: "4c4c4544-0000-1000-8000-000000000001", Issued: time.Unix(1700000000, 0)}
	s := token.NewSigner(key)

	b.Run("func", func(b *testing.B) {
		b.ReportAllocs()

		for b.Loop() {
			token.Sign(key, c)
		}
	})

	b.Run("signer", func(b *testing.B) {
		b.ReportAllocs()

		for b.Loop() {
			s.Sign(c)
		}
	})
}

func BenchmarkVerify(b *testing.B) {
	key := []byte("0123456789abcdef0123456789abcdef")
	tok := token.Sign(key, token.Claims{Kind: token.KindMetadata, MachineID: "4c4c4544-0000-1000-8000-000000000001", Binding: "a1"})
	s := token.NewSigner(key)

	b.Run("func", func(b *testing.B) {
		b.ReportAllocs()

		for b.Loop() {
			if _, err := token.Verify(key, tok); err != nil {
				b.Fatal(err)
			}
		}
	})

	b.Run("signer", func(b *testing.B) {
		b.ReportAllocs()

		for b.Loop() {
			if _, err := s.Verify(tok); err != nil {
				b.Fatal(err)
			}
		}
	})
}
