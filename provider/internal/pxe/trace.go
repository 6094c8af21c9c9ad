package pxe

import (
	"encoding/hex"

	"github.com/insomniacslk/dhcp/dhcpv4"

	"github.com/anvil-metal/anvil/provider/internal/boottrace"
)

// traceOffer marks an offer with boot options on the client's boot timeline: by its
// MAC, and by its machine ID when its client identifier names it.
func traceOffer(trace *boottrace.Recorder, server string, req *dhcpv4.DHCPv4) {
	if trace == nil {
		return
	}

	var firmware string
	if ca, err := RequestArch(req); err == nil {
		firmware = ca.Firmware
	}

	trace.MarkDHCP(req.ClientHWAddr.String(), clientMachineID(req), firmware, server)
}

// clientMachineID returns the machine ID the client's machine identifier (option 97,
// RFC 4578: type 0 and a 16-byte UUID) names, as the boot script's request names it
// (boot.ParseQuery): the SMBIOS UUID, lowercase, in its canonical text form. "" when
// the option is absent, malformed or a null UUID (the machine is then named by its
// MAC, which the boot script's request joins).
//
// The option's UUID has its first three fields little-endian, as EFI GUIDs do: iPXE
// swaps them from the SMBIOS UUID it prints as ${uuid} (RFC 4578 follows the EFI
// specification), and UEFI firmware sends the SMBIOS system GUID the same way. A client
// that sent them the other way round names a machine that never fetches a script; its
// offer still joins the right machine by MAC.
func clientMachineID(req *dhcpv4.DHCPv4) string {
	return machineIDFromOption(req.Options.Get(dhcpv4.OptionClientMachineIdentifier))
}

// machineIDFromOption is clientMachineID from the option's bytes.
func machineIDFromOption(raw []byte) string {
	if len(raw) != 17 || raw[0] != 0 {
		return ""
	}

	var u [16]byte

	copy(u[:], raw[1:])

	zeros, effs := true, true

	for _, b := range u {
		zeros = zeros && b == 0
		effs = effs && b == 0xff
	}

	if zeros || effs {
		return ""
	}

	u[0], u[1], u[2], u[3] = u[3], u[2], u[1], u[0]
	u[4], u[5] = u[5], u[4]
	u[6], u[7] = u[7], u[6]

	var buf [36]byte

	hex.Encode(buf[0:8], u[0:4])
	buf[8] = '-'
	hex.Encode(buf[9:13], u[4:6])
	buf[13] = '-'
	hex.Encode(buf[14:18], u[6:8])
	buf[18] = '-'
	hex.Encode(buf[19:23], u[8:10])
	buf[23] = '-'
	hex.Encode(buf[24:36], u[10:16])

	return string(buf[:])
}
