package pxe

import (
	"bytes"
	"errors"
	"net"
	"net/netip"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/iana"
)

// pxeDiscoveryControl is option 43 with PXE sub-option 6 (discovery control) = 8: no
// multicast or broadcast boot server discovery, take the boot file from this packet.
var pxeDiscoveryControl = []byte{6, 1, 8, 0xff}

var (
	broadcast        = netip.AddrFrom4([4]byte{255, 255, 255, 255})
	vendorPXEClient  = []byte("PXEClient")
	vendorHTTPClient = []byte("HTTPClient")
	userClassIPXE    = []byte("iPXE")
)

// Boot is the boot decision for one PXE client.
type Boot struct {
	Arch ClientArch
	// IPXE is set when the client is iPXE (ROM or chainloaded): it gets the script URL.
	IPXE bool
	// HTTP is set for UEFI HTTP boot clients (vendor class "HTTPClient"): File is then the
	// URL of the EFI binary, and the answer says "HTTPClient" back, as UEFI 2.5+ requires.
	HTTP bool
	// File is the boot file: a TFTP file name, or a URL (the script for iPXE, the EFI
	// binary for HTTP boot).
	File string
}

// vendorClass is the option 60 the answer carries.
func (b *Boot) vendorClass() []byte {
	if b.HTTP {
		return vendorHTTPClient
	}

	return vendorPXEClient
}

// BootFor decides the boot file for a request. Errors match ErrIgnore (not a PXE or
// HTTP boot client, an architecture Anvil does not boot) or ErrMalformed.
func BootFor(cfg *Config, req *dhcpv4.DHCPv4) (Boot, error) {
	return bootFor(cfg, bootOptions{
		vendorClass: req.Options.Get(dhcpv4.OptionClassIdentifier),
		arch:        req.Options.Get(dhcpv4.OptionClientSystemArchitectureType),
		userClass:   req.Options.Get(dhcpv4.OptionUserClassInformation),
		guid:        req.Options.Get(dhcpv4.OptionClientMachineIdentifier),
		mac:         req.ClientHWAddr,
	})
}

// bootOptions are what a boot decision reads of a request: the vendor class (60), client
// architecture (93), user class (77) and client machine identifier (97) options, nil when
// absent, and the hardware address.
type bootOptions struct {
	vendorClass, arch, userClass, guid []byte
	mac                                []byte
}

// bootFor is BootFor from the request's options.
func bootFor(cfg *Config, o bootOptions) (Boot, error) {
	vendorClass, arch, userClass := o.vendorClass, o.arch, o.userClass

	httpClient := bytes.HasPrefix(vendorClass, vendorHTTPClient)
	if !httpClient && !bytes.HasPrefix(vendorClass, vendorPXEClient) {
		return Boot{}, errNotPXE
	}

	ca, err := requestArch(arch, vendorClass)
	if err != nil {
		return Boot{Arch: ca}, err
	}

	b := Boot{Arch: ca}

	// The vendor class decides, not option 93: UEFI HTTP boot clients say "HTTPClient"
	// (and types 16/19), and take only an http(s) URL.
	if httpClient {
		return httpBoot(cfg, b, o)
	}

	// ROM and chainloaded iPXE both say "iPXE"; handing them a TFTP iPXE binary loops.
	if bytes.Contains(userClass, userClassIPXE) {
		b.IPXE = true
		b.File = cfg.ScriptURL

		return b, nil
	}

	if ca.HTTPBoot {
		// An HTTP boot architecture type from a PXEClient: it cannot take a TFTP file.
		return b, errUnknownArch
	}

	switch ca.Code {
	case iana.INTEL_X86PC:
		b.File = cfg.BIOSBootFile
	case iana.EFI_IA32, iana.EFI_BC, iana.EFI_X86_64:
		b.File = cfg.UEFIBootFile
	case iana.EFI_ARM64:
		if cfg.ARM64BootFile == "" {
			return b, errNoARM64
		}

		b.File = cfg.ARM64BootFile
	default:
		return b, errUnknownArch
	}

	return b, nil
}

// httpBoot is the answer to a UEFI HTTP boot client: the URL of the architecture's EFI
// boot file (the file PXE firmware gets over TFTP), served over HTTP; or, for arm64 with
// no such file, the URL of the machine's own Unified Kernel Image.
func httpBoot(cfg *Config, b Boot, o bootOptions) (Boot, error) {
	if cfg.HTTPBootURL == "" {
		return b, errHTTPBoot
	}

	b.HTTP = true

	switch b.Arch.Arch {
	case ArchAMD64:
		if b.Arch.Firmware != FirmwareUEFI {
			return b, errUnknownArch // a BIOS client cannot HTTP boot
		}

		b.File = cfg.HTTPBootURL + cfg.UEFIBootFile
	case ArchARM64:
		switch {
		case cfg.ARM64BootFile != "":
			b.File = cfg.HTTPBootURL + cfg.ARM64BootFile
		case cfg.ARM64UKI:
			b.File = cfg.HTTPBootURL + UKIPath(ArchARM64, o.guid, o.mac)
		default:
			return b, errNoARM64
		}
	default:
		return b, errUnknownArch
	}

	return b, nil
}

// answer is the ProxyDHCP decision for a request: an OFFER for a PXE DISCOVER, an ACK
// for a PXE REQUEST naming this server (option 54) or, received on the PXE boot server
// port (4011, bootPort), whatever its option 54 says. The reply never carries an
// address. A nil reply comes with an error matching ErrIgnore or ErrMalformed.
func answer(cfg *Config, req *dhcpv4.DHCPv4, bootPort bool) (*dhcpv4.DHCPv4, error) {
	if cfg.serverIP == nil {
		return nil, errors.New("pxe: Config not validated")
	}

	if req.OpCode != dhcpv4.OpcodeBootRequest {
		return nil, errNotBootRequest
	}

	var mt dhcpv4.MessageType

	switch req.MessageType() {
	case dhcpv4.MessageTypeDiscover:
		mt = dhcpv4.MessageTypeOffer
	case dhcpv4.MessageTypeRequest:
		// On port 67 a REQUEST is the client choosing among the offers; ours is only one
		// of them and the address is the site server's business.
		if !bootPort && !bytes.Equal(req.Options.Get(dhcpv4.OptionServerIdentifier), cfg.serverIP.To4()) {
			return nil, errNotForUs
		}

		mt = dhcpv4.MessageTypeAck
	default:
		return nil, errMessageType
	}

	b, err := BootFor(cfg, req)
	if err != nil {
		return nil, err
	}

	resp := newReply(cfg, req, mt)
	addBootOptions(cfg, req, resp, &b)

	return resp, nil
}

// newReply builds a reply without dhcpv4.NewReplyFromRequest, which reads crypto/rand for
// a transaction ID it then overwrites.
func newReply(cfg *Config, req *dhcpv4.DHCPv4, mt dhcpv4.MessageType) *dhcpv4.DHCPv4 {
	resp := &dhcpv4.DHCPv4{
		OpCode:        dhcpv4.OpcodeBootReply,
		HWType:        req.HWType,
		TransactionID: req.TransactionID,
		Flags:         req.Flags,
		ClientHWAddr:  req.ClientHWAddr,
		ClientIPAddr:  net.IPv4zero,
		YourIPAddr:    net.IPv4zero,
		ServerIPAddr:  cfg.serverIP,
		GatewayIPAddr: req.GatewayIPAddr,
		Options:       make(dhcpv4.Options, 12),
	}

	if mt == dhcpv4.MessageTypeAck {
		resp.ClientIPAddr = req.ClientIPAddr
	}

	resp.Options.Update(dhcpv4.OptMessageType(mt))
	resp.Options.Update(dhcpv4.OptServerIdentifier(cfg.serverIP))

	// RFC 3046: relay agent information comes back; RFC 6842: so does the client ID.
	for _, code := range []dhcpv4.OptionCode{dhcpv4.OptionRelayAgentInformation, dhcpv4.OptionClientIdentifier} {
		if v := req.Options.Get(code); v != nil {
			resp.Options.Update(dhcpv4.OptGeneric(code, v))
		}
	}

	return resp
}

// addBootOptions adds what PXE and HTTP boot firmware and iPXE need to boot, in both the
// options and the BOOTP header (some firmware reads only one of them).
func addBootOptions(cfg *Config, req, resp *dhcpv4.DHCPv4, b *Boot) {
	file := b.File

	resp.ServerIPAddr = cfg.serverIP
	resp.ServerHostName = cfg.serverName

	// The BOOTP file field holds 127 bytes; a longer script URL goes in option 67 only.
	if len(file) < 128 {
		resp.BootFileName = file
	}

	resp.Options.Update(dhcpv4.OptGeneric(dhcpv4.OptionClassIdentifier, b.vendorClass()))

	// PXE discovery control means nothing to an HTTP boot client.
	if !b.HTTP {
		resp.Options.Update(dhcpv4.OptGeneric(dhcpv4.OptionVendorSpecificInformation, pxeDiscoveryControl))
	}
	resp.Options.Update(dhcpv4.OptTFTPServerName(cfg.serverName))
	resp.Options.Update(dhcpv4.OptBootFileName(file))

	if guid := req.Options.Get(dhcpv4.OptionClientMachineIdentifier); guid != nil {
		resp.Options.Update(dhcpv4.OptGeneric(dhcpv4.OptionClientMachineIdentifier, guid))
	}
}

// ReplyTo returns where a reply to req goes: back to the port it came from for the boot
// server port, to the relay (giaddr:67) when relayed, to ciaddr:68 when the client has an
// address, else broadcast to 255.255.255.255:68.
func ReplyTo(cfg *Config, req *dhcpv4.DHCPv4, src netip.AddrPort, bootPort bool) netip.AddrPort {
	serverPort := uint16(cfg.dhcpPort()) //nolint:gosec // Validate keeps it ≤ 65535
	clientPort := serverPort + 1

	if bootPort {
		return src
	}

	if ip, ok := addr4(req.GatewayIPAddr); ok {
		return netip.AddrPortFrom(ip, serverPort)
	}

	if ip, ok := addr4(req.ClientIPAddr); ok {
		return netip.AddrPortFrom(ip, clientPort)
	}

	return netip.AddrPortFrom(broadcast, clientPort)
}

// addr4 converts a header address, reporting false for a missing or zero one.
func addr4(ip net.IP) (netip.Addr, bool) {
	ip4 := ip.To4()
	if ip4 == nil {
		return netip.Addr{}, false
	}

	a := netip.AddrFrom4([4]byte(ip4))

	return a, !a.IsUnspecified()
}
