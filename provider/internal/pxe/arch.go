package pxe

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strconv"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/iana"
)

// Firmware names shared with the HTTP side (scripts and assets are chosen by them).
const (
	FirmwareBIOS = "bios"
	FirmwareUEFI = "uefi"
)

// Architecture names shared with the HTTP side.
const (
	ArchAMD64 = "amd64"
	ArchARM64 = "arm64"
)

// ClientArch is what a client's option 93 (RFC 4578 client system architecture) says
// about it.
type ClientArch struct {
	// Code is the IANA architecture type as sent.
	Code iana.Arch
	// Arch is ArchAMD64 or ArchARM64.
	Arch string
	// Firmware is FirmwareBIOS or FirmwareUEFI.
	Firmware string
	// HTTPBoot is set for UEFI HTTP boot clients (types 16 and 19): they fetch an EFI
	// binary over HTTP, not over TFTP.
	HTTPBoot bool
}

// ClientArchFromCode maps an IANA architecture type to a ClientArch. It reports false for
// architectures Anvil does not boot.
//
// EFI IA32 (6) is mapped to amd64: firmware that sends it on x86-64 machines exists, and a
// 32-bit-only machine cannot run Talos anyway. EFI BC (7) is what most x86-64 UEFI
// firmware sends.
func ClientArchFromCode(code iana.Arch) (ClientArch, bool) {
	switch code {
	case iana.INTEL_X86PC:
		return ClientArch{Code: code, Arch: ArchAMD64, Firmware: FirmwareBIOS}, true
	case iana.EFI_IA32, iana.EFI_BC, iana.EFI_X86_64:
		return ClientArch{Code: code, Arch: ArchAMD64, Firmware: FirmwareUEFI}, true
	case iana.EFI_ARM64:
		return ClientArch{Code: code, Arch: ArchARM64, Firmware: FirmwareUEFI}, true
	case iana.EFI_X86_64_HTTP:
		return ClientArch{Code: code, Arch: ArchAMD64, Firmware: FirmwareUEFI, HTTPBoot: true}, true
	case iana.EFI_ARM64_HTTP:
		return ClientArch{Code: code, Arch: ArchARM64, Firmware: FirmwareUEFI, HTTPBoot: true}, true
	default:
		return ClientArch{Code: code}, false
	}
}

// RequestArch returns the architecture of a DHCP request: the first entry of option 93,
// or, when the option is absent, the "Arch:NNNNN" field of a PXEClient vendor class
// (PXE 2.1 puts it in both). A present but malformed option 93 is an error, so that a
// broken client never gets a guessed boot file.
func RequestArch(req *dhcpv4.DHCPv4) (ClientArch, error) {
	return requestArch(req.Options.Get(dhcpv4.OptionClientSystemArchitectureType), req.Options.Get(dhcpv4.OptionClassIdentifier))
}

// requestArch is RequestArch from the request's option 93 and vendor class (nil when
// absent).
func requestArch(raw, vc []byte) (ClientArch, error) {
	if raw != nil {
		if len(raw) < 2 || len(raw)%2 != 0 {
			return ClientArch{}, fmt.Errorf("%w: option 93 has %d bytes", ErrMalformed, len(raw))
		}

		code := iana.Arch(binary.BigEndian.Uint16(raw))
		if ca, ok := ClientArchFromCode(code); ok {
			return ca, nil
		}

		return ClientArch{Code: code}, errUnknownArch
	}

	// "PXEClient:Arch:00000:UNDI:002001"
	const field = ":Arch:"

	i := bytes.Index(vc, []byte(field))
	if i < 0 || len(vc) < i+len(field)+5 {
		return ClientArch{}, errNoArch
	}

	digits := vc[i+len(field) : i+len(field)+5]

	n, err := strconv.ParseUint(string(digits), 10, 16)
	if err != nil {
		return ClientArch{}, fmt.Errorf("%w: vendor class arch %q", ErrMalformed, digits)
	}

	code := iana.Arch(n)
	if ca, ok := ClientArchFromCode(code); ok {
		return ca, nil
	}

	return ClientArch{Code: code}, errUnknownArch
}
