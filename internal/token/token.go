// Package token is the format of the tokens the provider hands to machines: the agent's
// per-boot token and the per-allocation metadata token.
//
// A token is an HMAC-signed claim, so the provider keeps no token in its state: it
// recomputes and compares. A token names its kind, the machine it is bound to, and either
// when it was issued (agent boots: a newer boot supersedes it) or what it is bound to
// (metadata, by boot script or by kexec: the allocation).
package token

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"slices"
	"strings"
	"sync"
	"time"
)

// Kind says what a token may be used for.
type Kind byte

// Token kinds.
const (
	KindAgent    Kind = 'a'
	KindMetadata Kind = 'm'
	// KindKexecMetadata is a metadata token that travels only in a kexec order, over the
	// agent's pinned channel; KindMetadata's travel in boot scripts (iPXE, a UKI's
	// cmdline), which any host can fetch. Kept apart so that the config of a machine
	// handed over by kexec goes to a kexec token only.
	KindKexecMetadata Kind = 'k'
)

const (
	version = "v1"
	// MaxLength bounds what Parse accepts, so oversized input is refused before any work.
	MaxLength = 512
	macSize   = 32
)

// Claims is what a token says.
type Claims struct {
	Kind      Kind
	MachineID string
	// Issued is set for agent tokens.
	Issued time.Time
	// Binding is set for metadata tokens: the allocation ID.
	Binding string
}

// ErrInvalid is returned for every token that does not verify; the reason is not told to
// the caller, so a forger learns nothing.
var ErrInvalid = errors.New("invalid token")

var enc = base64.RawURLEncoding.Strict()

// Signer signs and verifies tokens with one key. Keying an HMAC is most of what a token
// costs, so a Signer keys its hashes once and reuses them: build one at start and share
// it; it is safe for concurrent use.
type Signer struct {
	key  []byte
	pool sync.Pool // of *keyed
}

// NewSigner returns a Signer for the key (copied: the caller may reuse its slice).
func NewSigner(key []byte) *Signer {
	return &Signer{key: bytes.Clone(key)}
}

// Sign returns the token for the claims.
func (s *Signer) Sign(c Claims) string {
	k := s.get()
	defer s.put(k)

	return k.sign(c)
}

// Verify checks the token's signature and returns its claims.
func (s *Signer) Verify(tok string) (Claims, error) {
	k := s.get()
	defer s.put(k)

	return k.verify(tok)
}

func (s *Signer) get() *keyed {
	if k, ok := s.pool.Get().(*keyed); ok {
		return k
	}

	return newKeyed(s.key)
}

func (s *Signer) put(k *keyed) {
	// A token made of long claims grew the buffer: let it go rather than keep it.
	if cap(k.buf) > 2*MaxLength {
		k.buf = nil
	}

	s.pool.Put(k)
}

// Sign returns the token for the claims, keying an HMAC for this one token; a caller
// that signs more than once uses a Signer.
func Sign(key []byte, c Claims) string {
	return newKeyed(key).sign(c)
}

// Verify checks the token's signature and returns its claims, keying an HMAC for this
// one token; a caller that verifies more than once uses a Signer.
func Verify(key []byte, tok string) (Claims, error) {
	return newKeyed(key).verify(tok)
}

// keyed is a keyed HMAC with the scratch space of one token, used by one goroutine at a
// time.
type keyed struct {
	mac hash.Hash
	// buf holds the payload and then the token being built (Sign), or the token's
	// decoded parts (Verify).
	buf []byte
	sum [sha256.Size]byte
}

func newKeyed(key []byte) *keyed {
	return &keyed{mac: hmac.New(sha256.New, key)}
}

func (k *keyed) sign(c Claims) string {
	payload := c.appendTo(k.buf[:0])
	mac := k.sumOf(payload)

	// The token after the payload in the same buffer, then one string of it.
	n := len(payload)
	b := append(payload, version+"."...)
	b = enc.AppendEncode(b, payload)
	b = append(b, '.')
	b = enc.AppendEncode(b, mac)
	k.buf = b

	return string(b[n:])
}

func (k *keyed) verify(tok string) (Claims, error) {
	if len(tok) > MaxLength {
		return Claims{}, ErrInvalid
	}

	v, rest, ok := strings.Cut(tok, ".")
	if !ok || v != version {
		return Claims{}, ErrInvalid
	}

	p, m, ok := strings.Cut(rest, ".")
	if !ok {
		return Claims{}, ErrInvalid
	}

	// The token's bytes in the buffer (decoding takes bytes), then the payload and the
	// MAC decoded after them.
	b := slices.Grow(k.buf[:0], len(rest)+enc.DecodedLen(len(p))+enc.DecodedLen(len(m)))
	k.buf = b
	in := append(b, rest...)

	payload, err := decodeAppend(in[len(in):], in[:len(p)])
	if err != nil {
		return Claims{}, ErrInvalid
	}

	mac, err := decodeAppend(payload[len(payload):], in[len(p)+1:])
	if err != nil || !hmac.Equal(mac, k.sumOf(payload)) {
		return Claims{}, ErrInvalid
	}

	c, err := decode(payload)
	if err != nil {
		return Claims{}, ErrInvalid
	}

	return c, nil
}

// decodeAppend decodes src after dst, whose capacity holds it.
func decodeAppend(dst, src []byte) ([]byte, error) {
	n, err := enc.Decode(dst[len(dst):len(dst)+enc.DecodedLen(len(src))], src)

	return dst[:len(dst)+n], err
}

// sumOf returns the payload's MAC, in k's own space (valid until k is used again).
func (k *keyed) sumOf(payload []byte) []byte {
	k.mac.Reset()
	k.mac.Write(payload)

	return k.mac.Sum(k.sum[:0])[:macSize]
}

// appendTo appends the claims' encoding: kind, issued (unix nanoseconds, 8 bytes), then
// length-prefixed machine ID and binding.
func (c Claims) appendTo(b []byte) []byte {
	b = append(b, byte(c.Kind))

	var issued int64
	if !c.Issued.IsZero() {
		issued = c.Issued.UnixNano()
	}

	b = binary.BigEndian.AppendUint64(b, uint64(issued))
	b = appendString(b, c.MachineID)
	b = appendString(b, c.Binding)

	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(s))) //nolint:gosec // a longer string makes a token past MaxLength, which Verify refuses

	return append(b, s...)
}

func decode(b []byte) (Claims, error) {
	if len(b) < 9 {
		return Claims{}, errors.New("short payload")
	}

	c := Claims{Kind: Kind(b[0])}

	if issued := int64(binary.BigEndian.Uint64(b[1:9])); issued != 0 { //nolint:gosec // encode wrote an int64's bits
		c.Issued = time.Unix(0, issued)
	}

	b = b[9:]

	var err error

	if c.MachineID, b, err = readString(b); err != nil {
		return Claims{}, err
	}

	if c.Binding, b, err = readString(b); err != nil {
		return Claims{}, err
	}

	if len(b) != 0 {
		return Claims{}, fmt.Errorf("%d trailing bytes", len(b))
	}

	return c, nil
}

func readString(b []byte) (string, []byte, error) {
	if len(b) < 2 {
		return "", nil, errors.New("short string length")
	}

	n := int(binary.BigEndian.Uint16(b))
	if len(b) < 2+n {
		return "", nil, errors.New("short string")
	}

	return string(b[2 : 2+n]), b[2+n:], nil
}
