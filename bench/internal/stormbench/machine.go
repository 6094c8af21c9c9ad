package stormbench

import (
	"encoding/binary"
	"fmt"
	"net"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// machine is one simulated PXE machine: BIOS firmware that chainloads iPXE
// (undionly.kpxe), as most of a rack of servers does.
type machine struct {
	Index int
	MAC   net.HardwareAddr
	UUID  string // SMBIOS system UUID as iPXE's ${uuid} prints it
	guid  [16]byte
	salt  uint32 // per run, so that a late answer of an earlier run matches nothing
}

// newMachine derives machine i's identity: the same in every run and for both stacks,
// so that the site server hands each the same lease.
func newMachine(i int, salt uint32) machine {
	m := machine{Index: i, salt: salt}

	var idx [4]byte

	binary.BigEndian.PutUint32(idx[:], uint32(i)) //nolint:gosec // i < 2^24, checked by the client's flags

	m.MAC = net.HardwareAddr{0x02, 0xa5, 0x5e, idx[1], idx[2], idx[3]}
	m.UUID = fmt.Sprintf("a5a5f00d-5e00-4000-8000-%012x", i)

	// Option 97 carries the UUID with its first three fields little-endian, as EFI
	// GUIDs and iPXE have it.
	u := [16]byte{0xa5, 0xa5, 0xf0, 0x0d, 0x5e, 0x00, 0x40, 0x00, 0x80, 0x00, 0, 0, idx[0], idx[1], idx[2], idx[3]}
	m.guid = [16]byte{u[3], u[2], u[1], u[0], u[5], u[4], u[7], u[6]}
	copy(m.guid[8:], u[8:])

	return m
}

// xid is the transaction ID of the machine's firmware (ipxe false) or iPXE exchange,
// started over restart times: salt in bits 27-31, restart in 25-26, the index in 1-24.
func (m machine) xid(ipxe bool, restart int) dhcpv4.TransactionID {
	v := m.salt<<27 ^ uint32(restart&3)<<25 ^ uint32(m.Index)<<1 //nolint:gosec // index < 2^24, checked by the client's flags
	if ipxe {
		v |= 1
	}

	var x dhcpv4.TransactionID

	binary.BigEndian.PutUint32(x[:], v)

	return x
}

// pxeOptions are the options BIOS PXE firmware (and iPXE, which adds its user class)
// puts in every DISCOVER and REQUEST.
func (m machine) pxeOptions(ipxe bool) []dhcpv4.Modifier {
	mods := []dhcpv4.Modifier{
		dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient:Arch:00000:UNDI:002001")),
		dhcpv4.WithGeneric(dhcpv4.OptionClientSystemArchitectureType, []byte{0, 0}),
		dhcpv4.WithGeneric(dhcpv4.OptionClientNetworkInterfaceIdentifier, []byte{1, 2, 1}),
		dhcpv4.WithGeneric(dhcpv4.OptionClientMachineIdentifier, append([]byte{0}, m.guid[:]...)),
		dhcpv4.WithRequestedOptions(
			dhcpv4.OptionSubnetMask, dhcpv4.OptionRouter, dhcpv4.OptionDomainNameServer,
			dhcpv4.OptionHostName, dhcpv4.OptionDomainName, dhcpv4.OptionVendorSpecificInformation,
			dhcpv4.OptionServerIdentifier, dhcpv4.OptionClassIdentifier,
			dhcpv4.OptionTFTPServerName, dhcpv4.OptionBootfileName,
		),
	}

	if ipxe {
		// iPXE's user class is the bare string, not RFC 3004's length-prefixed list.
		mods = append(mods, dhcpv4.WithGeneric(dhcpv4.OptionUserClassInformation, []byte("iPXE")))
	}

	return mods
}

// ipxeVars are the settings iPXE expands in a script for this machine (undionly.kpxe:
// a 32-bit BIOS build).
func (m machine) ipxeVars() map[string]string {
	hexhyp := fmt.Sprintf("%02x-%02x-%02x-%02x-%02x-%02x", m.MAC[0], m.MAC[1], m.MAC[2], m.MAC[3], m.MAC[4], m.MAC[5])

	return map[string]string{
		"uuid":            m.UUID,
		"netX/mac:hexhyp": hexhyp,
		"net0/mac:hexhyp": hexhyp,
		"netX/mac":        m.MAC.String(),
		"net0/mac":        m.MAC.String(),
		"mac":             m.MAC.String(),
		"buildarch":       "i386",
		"platform":        "pcbios",
		"serial":          fmt.Sprintf("STORM%06d", m.Index),
	}
}
