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

// ParseQuery parses the query iPXE sends.
func ParseQuery(rawQuery string) (Request, error) {
	if len(rawQuery) > MaxQueryLength {
		return Request{}, fmt.Errorf("%w: query longer than %d bytes", ErrBadRequest, MaxQueryLength)
	}

	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return Request{}, fmt.Errorf("%w: malformed query", ErrBadRequest)
	}

	var req Request

	if req.MAC, err = parseMAC(q.Get("mac")); err != nil {
		return Request{}, err
	}

	uuid, null, err := parseUUID(q.Get("uuid"))
	if err != nil {
		return Request{}, err
	}

	req.UUID = uuid
	req.MachineID = uuid

	if null {
		req.MachineID = "mac-" + strings.ReplaceAll(req.MAC, ":", "")
	}

	if req.Arch, err = ParseArch(q.Get("arch")); err != nil {
		return Request{}, err
	}

	switch p := q.Get("platform"); p {
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

	hw, err := net.ParseMAC(strings.ReplaceAll(s, "-", ":"))
	if err != nil || len(hw) != 6 {
		return "", fmt.Errorf("%w: invalid mac %.32q", ErrBadRequest, s)
	}

	return hw.String(), nil
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
