package tftp

import (
	"fmt"
	"strconv"
	"time"
)

// Option names (RFC 2348, 2349, 7440).
const (
	OptBlockSize  = "blksize"
	OptTransfer   = "tsize"
	OptTimeout    = "timeout"
	OptWindowSize = "windowsize"
)

// maxTimeout is the longest retransmission timeout a client may negotiate; RFC 2349
// allows up to 255 s. A longer one is not acknowledged (RFC 2347 lets a server ignore an
// option), so the server's own timeout applies: a client that asked 255 s and never
// acknowledged would otherwise hold its transfer's slot, socket and goroutine for 255 s
// per retry, 25 minutes. Firmware asks for none, or a few seconds.
const maxTimeout = 5 * time.Second

// limits are the largest values the server agrees to.
type limits struct {
	maxBlockSize  int
	maxWindowSize int
}

// params are a transfer's negotiated parameters.
type params struct {
	blockSize  int
	windowSize int
	// timeout is the client's requested retransmission timeout, 0 if not negotiated.
	timeout time.Duration
	// oack is what the OACK carries; empty means no OACK: data starts at once.
	oack []Option
}

// negotiate answers a read request's options for a file of size bytes (RFC 2347): each
// known option with a valid value is accepted (blksize and windowsize lowered to the
// server's limits), a timeout above maxTimeout and unknown options are ignored, and a
// known option with an invalid value refuses the request with an error for an ERROR 8
// packet.
func negotiate(req *Request, size int64, lim limits) (params, error) {
	p := params{blockSize: defaultBlockSize, windowSize: 1}

	for _, o := range req.Options {
		switch o.Name {
		case OptBlockSize:
			v, err := optionInt(o, minBlockSize, maxBlockSize)
			if err != nil {
				return params{}, err
			}

			p.blockSize = min(v, lim.maxBlockSize)
			p.oack = append(p.oack, Option{Name: o.Name, Value: strconv.Itoa(p.blockSize)})
		case OptWindowSize:
			v, err := optionInt(o, 1, 65535)
			if err != nil {
				return params{}, err
			}

			p.windowSize = min(v, lim.maxWindowSize)
			p.oack = append(p.oack, Option{Name: o.Name, Value: strconv.Itoa(p.windowSize)})
		case OptTimeout:
			v, err := optionInt(o, 1, 255)
			if err != nil {
				return params{}, err
			}

			// The OACK must repeat the value asked (RFC 2349): one above the cap is
			// ignored, not lowered.
			if d := time.Duration(v) * time.Second; d <= maxTimeout {
				p.timeout = d
				p.oack = append(p.oack, Option{Name: o.Name, Value: o.Value})
			}
		case OptTransfer:
			// A reader sends 0 and is told the size (RFC 2349).
			if _, err := optionInt(o, 0, 0); err != nil {
				return params{}, err
			}

			p.oack = append(p.oack, Option{Name: o.Name, Value: strconv.FormatInt(size, 10)})
		}
	}

	return p, nil
}

// optionInt parses an option's decimal value within [lo, hi].
func optionInt(o Option, lo, hi int) (int, error) {
	v, err := strconv.Atoi(o.Value)
	if err != nil || v < lo || v > hi || !digits(o.Value) {
		return 0, fmt.Errorf("invalid %s value %q: want %d to %d", o.Name, truncate(o.Value), lo, hi)
	}

	return v, nil
}

// digits reports whether s is only decimal digits (Atoi also takes a sign).
func digits(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}

	return s != ""
}
