// Package token is the format of the tokens the provider hands to machines: the agent's
// per-boot token and the per-allocation metadata token.
//
// A token is an HMAC-signed claim, so the provider keeps no token in its state: it
// recomputes and compares. A token names its kind, the machine it is bound to, and either
// when it was issued (agent boots: a newer boot supersedes it) or what it is bound to
// (metadata: the allocation).
package token

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Kind says what a token may be used for.
type Kind byte

// Token kinds.
const (
	KindAgent    Kind = 'a'
	KindMetadata Kind = 'm'
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

// Sign returns the token for the claims.
func Sign(key []byte, c Claims) string {
	payload := c.encode()

	return version + "." + enc.EncodeToString(payload) + "." + enc.EncodeToString(sum(key, payload))
}

// Verify checks the token's signature and returns its claims.
func Verify(key []byte, tok string) (Claims, error) {
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

	payload, err := enc.DecodeString(p)
	if err != nil {
		return Claims{}, ErrInvalid
	}

	mac, err := enc.DecodeString(m)
	if err != nil || !hmac.Equal(mac, sum(key, payload)) {
		return Claims{}, ErrInvalid
	}

	c, err := decode(payload)
	if err != nil {
		return Claims{}, ErrInvalid
	}

	return c, nil
}

func sum(key, payload []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write(payload)

	return h.Sum(nil)[:macSize]
}

// encode: kind, issued (unix nanoseconds, 8 bytes), then length-prefixed machine ID and
// binding.
func (c Claims) encode() []byte {
	b := make([]byte, 0, 1+8+2+len(c.MachineID)+2+len(c.Binding))
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
