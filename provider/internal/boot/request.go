package boot

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
)

// MaxQueryLength bounds the boot-script query: anything longer is not iPXE.
const MaxQueryLength = 512

// Request is a parsed boot-script request (/ipxe/boot.ipxe?uuid=…&mac=…&arch=…&platform=…).
type Request struct {
	// MachineID identifies the machine: its SMBIOS UUID, or "mac-<hex>" of the booting
	// NIC when the firmware reports a null UUID.
	MachineID string
	UUID      string
	MAC       string // aa:bb:cc:dd:ee:ff
	Arch      string // amd64, arm64
	Firmware  string // bios, uefi
}

// ErrBadRequest wraps every reason a query is refused.
var ErrBadRequest = errors.New("bad boot request")

// ParseQuery parses the query iPXE sends. It reads the query in place rather than
// through url.ParseQuery, whose map and slices cost more than the rest of a boot-script
// answer; what it accepts and refuses is the same.
func ParseQuery(rawQuery string) (Request, error) {
	if len(rawQuery) > MaxQueryLength {
		return Request{}, fmt.Errorf("%w: query longer than %d bytes", ErrBadRequest, MaxQueryLength)
	}

	f, err := scanQuery(rawQuery)
	if err != nil {
		return Request{}, err
	}

	var req Request

	if req.MAC, err = parseMAC(f.mac); err != nil {
		return Request{}, err
	}

	uuid, null, err := parseUUID(f.uuid)
	if err != nil {
		return Request{}, err
	}

	req.UUID = uuid
	req.MachineID = uuid

	if null {
		req.MachineID = "mac-" + strings.ReplaceAll(req.MAC, ":", "")
	}

	if req.Arch, err = ParseArch(f.arch); err != nil {
		return Request{}, err
	}

	switch p := f.platform; p {
	case "pcbios":
		req.Firmware = "bios"
	case "efi":
		req.Firmware = "uefi"
	case "":
		return Request{}, fmt.Errorf("%w: missing platform", ErrBadRequest)
	default:
		return Request{}, fmt.Errorf("%w: unknown platform %.32q", ErrBadRequest, p)
	}

	return req, nil
}

// queryFields are the first values of the parameters a boot-script request carries.
type queryFields struct {
	uuid, mac, arch, platform string
}

// scanQuery finds the parameters as url.ParseQuery(q) followed by Get would: pairs split
// at '&', a pair with ';' or an escape that does not decode refuses the whole query, the
// first value of a key counts. Unescaped values are substrings of q.
func scanQuery(q string) (queryFields, error) {
	var (
		f    queryFields
		seen [4]bool
	)

	for q != "" {
		var pair string

		pair, q, _ = strings.Cut(q, "&")
		if strings.IndexByte(pair, ';') >= 0 {
			return queryFields{}, fmt.Errorf("%w: malformed query", ErrBadRequest)
		}

		if pair == "" {
			continue
		}

		key, value, _ := strings.Cut(pair, "=")

		key, ok := queryUnescape(key)
		if !ok {
			return queryFields{}, fmt.Errorf("%w: malformed query", ErrBadRequest)
		}

		if value, ok = queryUnescape(value); !ok {
			return queryFields{}, fmt.Errorf("%w: malformed query", ErrBadRequest)
		}

		var i int

		switch key {
		case "uuid":
			i = 0
		case "mac":
			i = 1
		case "arch":
			i = 2
		case "platform":
			i = 3
		default:
			continue
		}

		if seen[i] {
			continue
		}

		seen[i] = true

		switch i {
		case 0:
			f.uuid = value
		case 1:
			f.mac = value
		case 2:
			f.arch = value
		default:
			f.platform = value
		}
	}

	return f, nil
}

// queryUnescape decodes a query component; iPXE's never need it, so the common case
// returns s itself.
func queryUnescape(s string) (string, bool) {
	if strings.IndexByte(s, '%') < 0 && strings.IndexByte(s, '+') < 0 {
		return s, true
	}

	u, err := url.QueryUnescape(s)

	return u, err == nil
}

// ParseArch maps iPXE's ${buildarch} to a Go architecture name. 32-bit BIOS builds of
// iPXE (QEMU's NIC ROMs, undionly.kpxe) say i386 on x86-64 machines.
func ParseArch(buildarch string) (string, error) {
	switch buildarch {
	case "i386", "x86_64":
		return "amd64", nil
	case "arm64":
		return "arm64", nil
	case "":
		return "", fmt.Errorf("%w: missing arch", ErrBadRequest)
	default:
		return "", fmt.Errorf("%w: unsupported arch %.32q", ErrBadRequest, buildarch)
	}
}

func parseMAC(s string) (string, error) {
	if s == "" {
		return "", fmt.Errorf("%w: missing mac", ErrBadRequest)
	}

	if mac, ok := parseMAC48(s); ok {
		return mac, nil
	}

	// Every other form net.ParseMAC knows (dotted, or ':' and '-' wherever): 6 bytes only.
	hw, err := net.ParseMAC(strings.ReplaceAll(s, "-", ":"))
	if err != nil || len(hw) != 6 {
		return "", fmt.Errorf("%w: invalid mac %.32q", ErrBadRequest, s)
	}

	return hw.String(), nil
}

// parseMAC48 reads the form iPXE sends (${netX/mac:hexhyp}, or with colons) without the
// allocations of net.ParseMAC and HardwareAddr.String: six hex pairs, each separator ':'
// or '-'. It returns the lower-case colon form.
func parseMAC48(s string) (string, bool) {
	const n = 6*3 - 1
	if len(s) != n {
		return "", false
	}

	var out [n]byte

	for i := range n {
		c := s[i]

		if i%3 == 2 {
			if c != ':' && c != '-' {
				return "", false
			}

			out[i] = ':'

			continue
		}

		switch {
		case c >= '0' && c <= '9', c >= 'a' && c <= 'f':
		case c >= 'A' && c <= 'F':
			c += 'a' - 'A'
		default:
			return "", false
		}

		out[i] = c
	}

	return string(out[:]), true
}

// parseUUID validates an SMBIOS UUID in its canonical text form and reports whether it is
// one of the null values firmware uses when it has none.
func parseUUID(s string) (uuid string, null bool, err error) {
	if s == "" {
		return "", false, fmt.Errorf("%w: missing uuid", ErrBadRequest)
	}

	s = strings.ToLower(s)
	if len(s) != 36 {
		return "", false, fmt.Errorf("%w: invalid uuid %.40q", ErrBadRequest, s)
	}

	zeros, effs := true, true

	for i := range len(s) {
		c := s[i]

		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return "", false, fmt.Errorf("%w: invalid uuid %.40q", ErrBadRequest, s)
			}

			continue
		}

		switch {
		case c >= '0' && c <= '9', c >= 'a' && c <= 'f':
		default:
			return "", false, fmt.Errorf("%w: invalid uuid %.40q", ErrBadRequest, s)
		}

		zeros = zeros && c == '0'
		effs = effs && c == 'f'
	}

	return s, zeros || effs, nil
}
