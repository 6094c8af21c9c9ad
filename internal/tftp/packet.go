// Package tftp is a read-only TFTP server and a small client that speak RFC 1350 with
// option negotiation (RFC 2347): blksize (RFC 2348), tsize and timeout (RFC 2349) and
// windowsize (RFC 7440), so firmware that asks for windows gets them.
package tftp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// Opcodes (RFC 1350, RFC 2347).
const (
	opRRQ   uint16 = 1
	opWRQ   uint16 = 2
	opDATA  uint16 = 3
	opACK   uint16 = 4
	opERROR uint16 = 5
	opOACK  uint16 = 6
)

// Error codes (RFC 1350, RFC 2347).
const (
	ErrCodeUndefined    uint16 = 0
	ErrCodeNotFound     uint16 = 1
	ErrCodeAccess       uint16 = 2
	ErrCodeDiskFull     uint16 = 3
	ErrCodeIllegalOp    uint16 = 4
	ErrCodeUnknownTID   uint16 = 5
	ErrCodeFileExists   uint16 = 6
	ErrCodeNoSuchUser   uint16 = 7
	ErrCodeOptionRefuse uint16 = 8
)

const (
	// defaultBlockSize is RFC 1350's block size, used when blksize is not negotiated.
	defaultBlockSize = 512
	// minBlockSize and maxBlockSize bound blksize (RFC 2348).
	minBlockSize = 8
	maxBlockSize = 65464
	// maxRequest bounds a request datagram: a 255-byte name, a mode and a few options
	// fit many times over; anything longer is not a request a client means.
	maxRequest = 2048
)

// Request is a parsed read or write request.
type Request struct {
	// Write is true for a write request (WRQ), which this server refuses.
	Write bool
	// Filename is the requested name as sent (not cleaned).
	Filename string
	// Mode is the transfer mode, lower-cased ("octet", "netascii", "mail").
	Mode string
	// Options are the requested options, names lower-cased, in the order sent.
	Options []Option
}

// Option is one requested or acknowledged option.
type Option struct {
	Name, Value string
}

// Option returns the value of the named option (lower-case name) and whether it was sent.
func (r *Request) Option(name string) (string, bool) {
	for _, o := range r.Options {
		if o.Name == name {
			return o.Value, true
		}
	}

	return "", false
}

// ParseRequest parses a read or write request datagram: opcode, file name, mode, then
// option name/value pairs, every string NUL-terminated. It refuses anything else with an
// error that says what is wrong, suitable to send back in an ERROR packet.
func ParseRequest(b []byte) (*Request, error) {
	if len(b) < 2 {
		return nil, errors.New("short packet")
	}

	if len(b) > maxRequest {
		return nil, fmt.Errorf("request longer than %d bytes", maxRequest)
	}

	req := &Request{}

	switch op := binary.BigEndian.Uint16(b); op {
	case opRRQ:
	case opWRQ:
		req.Write = true
	default:
		return nil, fmt.Errorf("opcode %d is not a request", op)
	}

	body := b[2:]
	if len(body) == 0 || body[len(body)-1] != 0 {
		return nil, errors.New("request not NUL-terminated")
	}

	fields := strings.Split(string(body[:len(body)-1]), "\x00")
	if len(fields) < 2 {
		return nil, errors.New("request without a mode")
	}

	req.Filename = fields[0]
	if req.Filename == "" {
		return nil, errors.New("empty file name")
	}

	req.Mode = strings.ToLower(fields[1])
	switch req.Mode {
	case "octet", "netascii", "mail":
	default:
		return nil, fmt.Errorf("unknown mode %q", truncate(fields[1]))
	}

	opts := fields[2:]
	if len(opts)%2 != 0 {
		return nil, fmt.Errorf("option %q without a value", truncate(opts[len(opts)-1]))
	}

	for i := 0; i < len(opts); i += 2 {
		name := strings.ToLower(opts[i])
		if name == "" {
			return nil, errors.New("empty option name")
		}

		if _, dup := req.Option(name); dup {
			return nil, fmt.Errorf("option %q sent twice", truncate(name))
		}

		req.Options = append(req.Options, Option{Name: name, Value: opts[i+1]})
	}

	return req, nil
}

// truncate makes a client-supplied string fit to be quoted back in an error: at most 32
// bytes, each byte outside printable ASCII shown as "?", so that quoting cannot blow it
// up into escapes and the error fits an ERROR packet.
func truncate(s string) string {
	const limit = 32

	b := []byte(s[:min(len(s), limit)])
	for i, c := range b {
		if c < ' ' || c > '~' {
			b[i] = '?'
		}
	}

	if len(s) > limit {
		return string(b) + "..."
	}

	return string(b)
}

// appendRequest encodes a read request.
func appendRequest(b []byte, name, mode string, opts []Option) []byte {
	b = binary.BigEndian.AppendUint16(b, opRRQ)
	b = append(append(b, name...), 0)
	b = append(append(b, mode...), 0)

	for _, o := range opts {
		b = append(append(b, o.Name...), 0)
		b = append(append(b, o.Value...), 0)
	}

	return b
}

// appendOACK encodes an option acknowledgement.
func appendOACK(b []byte, opts []Option) []byte {
	b = binary.BigEndian.AppendUint16(b, opOACK)

	for _, o := range opts {
		b = append(append(b, o.Name...), 0)
		b = append(append(b, o.Value...), 0)
	}

	return b
}

// parseOACK decodes an option acknowledgement's options (after the opcode).
func parseOACK(b []byte) ([]Option, error) {
	if len(b) == 0 {
		return nil, nil
	}

	if b[len(b)-1] != 0 {
		return nil, errors.New("OACK not NUL-terminated")
	}

	fields := bytes.Split(b[:len(b)-1], []byte{0})
	if len(fields)%2 != 0 {
		return nil, errors.New("OACK option without a value")
	}

	opts := make([]Option, 0, len(fields)/2)
	for i := 0; i < len(fields); i += 2 {
		opts = append(opts, Option{Name: strings.ToLower(string(fields[i])), Value: string(fields[i+1])})
	}

	return opts, nil
}

// appendError encodes an ERROR packet.
func appendError(b []byte, code uint16, msg string) []byte {
	b = binary.BigEndian.AppendUint16(b, opERROR)
	b = binary.BigEndian.AppendUint16(b, code)

	return append(append(b, msg...), 0)
}

// appendACK encodes an ACK of a block.
func appendACK(b []byte, block uint16) []byte {
	b = binary.BigEndian.AppendUint16(b, opACK)

	return binary.BigEndian.AppendUint16(b, block)
}

// RemoteError is an ERROR packet received from the peer.
type RemoteError struct {
	Code    uint16
	Message string
}

func (e *RemoteError) Error() string {
	return fmt.Sprintf("peer sent TFTP error %d: %s", e.Code, e.Message)
}

// parseError decodes an ERROR packet's code and message (after the opcode).
func parseError(b []byte) *RemoteError {
	if len(b) < 2 {
		return &RemoteError{Code: ErrCodeUndefined, Message: "(short error packet)"}
	}

	msg, _, _ := bytes.Cut(b[2:], []byte{0})
	if len(msg) > 256 {
		msg = append(msg[:256:256], "..."...)
	}

	return &RemoteError{Code: binary.BigEndian.Uint16(b), Message: string(msg)}
}
