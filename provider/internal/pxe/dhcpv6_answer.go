package pxe

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/iana"
)

// enterprisePXE is the IANA enterprise number of the PXE and UEFI HTTP boot vendor
// classes (Intel, 343): RFC 5970 clients put "PXEClient" or "HTTPClient" under it.
const enterprisePXE = 343

// Reasons to leave a DHCPv6 packet unanswered, beside the DHCPv4 ones they share
// (errNotPXE, errUnknownArch, errNoArch, errNoARM64, errHTTPBoot, errNotForUs,
// errMessageType).
var (
	errBIOS6          = &ignoreError{reason: "bios_no_ipv6"}
	errNoTFTP6        = &ignoreError{"pxe6_not_configured", "UEFI PXE client over IPv6: no TFTP boot URL is configured"}
	errServerIDInMsg6 = &ignoreError{reason: "unexpected_server_id"}
	errNoIANA6        = &ignoreError{reason: "no_ia_na"}
	errRelayNested6   = &ignoreError{reason: "relay_nested"}
	errRelayLink6     = &ignoreError{reason: "relay_other_link"}
)

// dhcpv6IgnoreErrors lists the reasons the DHCPv6 server counts, so that their counters
// exist from the start.
var dhcpv6IgnoreErrors = []*ignoreError{
	errNotPXE, errNoArch, errUnknownArch, errNoARM64, errHTTPBoot, errNotForUs, errMessageType,
	errBIOS6, errNoTFTP6, errServerIDInMsg6, errNoIANA6, errRelayNested6, errRelayLink6,
}

// answer6 is the DHCPv6 decision for one (unrelayed) message: the reply, or an error
// matching ErrIgnore or ErrMalformed. It touches no socket and keeps no state.
func answer6(cfg *DHCPv6Config, req *dhcpv6.Message) (*dhcpv6.Message, error) {
	if cfg.serverID == nil {
		return nil, errors.New("pxe: DHCPv6Config not validated")
	}

	if err := checkServerID6(cfg, req); err != nil {
		return nil, err
	}

	clientID := req.GetOneOption(dhcpv6.OptionClientID)
	if clientID == nil && req.MessageType != dhcpv6.MessageTypeInformationRequest {
		return nil, fmt.Errorf("%w: %s without a client ID", ErrMalformed, req.MessageType)
	}

	if cfg.Pool == nil {
		return answerInfoMode6(cfg, req)
	}

	return answerFullMode6(cfg, req)
}

// checkServerID6 applies RFC 8415's rules on the server ID option: required and ours in
// REQUEST, RENEW, RELEASE and DECLINE; absent in SOLICIT, CONFIRM and REBIND; ours if
// present in INFORMATION-REQUEST. Other message types are not for a server.
func checkServerID6(cfg *DHCPv6Config, req *dhcpv6.Message) error {
	opt := req.GetOneOption(dhcpv6.OptionServerID)

	switch req.MessageType {
	case dhcpv6.MessageTypeSolicit, dhcpv6.MessageTypeConfirm, dhcpv6.MessageTypeRebind:
		if opt != nil {
			return errServerIDInMsg6
		}
	case dhcpv6.MessageTypeRequest, dhcpv6.MessageTypeRenew, dhcpv6.MessageTypeRelease, dhcpv6.MessageTypeDecline:
		if opt == nil || !bytes.Equal(opt.ToBytes(), cfg.serverID) {
			return errNotForUs
		}
	case dhcpv6.MessageTypeInformationRequest:
		if opt != nil && !bytes.Equal(opt.ToBytes(), cfg.serverID) {
			return errNotForUs
		}
	default:
		return errMessageType
	}

	return nil
}

// answerInfoMode6 answers beside a site's DHCPv6 server (or SLAAC router): boot clients
// get their boot URL and no address; everyone else, and every message about addresses
// (RENEW, REBIND, RELEASE, DECLINE, CONFIRM), is the site's business.
func answerInfoMode6(cfg *DHCPv6Config, req *dhcpv6.Message) (*dhcpv6.Message, error) {
	mt := dhcpv6.MessageTypeReply

	switch req.MessageType {
	case dhcpv6.MessageTypeSolicit:
		// Never a rapid commit: nothing is committed here.
		mt = dhcpv6.MessageTypeAdvertise
	case dhcpv6.MessageTypeRequest, dhcpv6.MessageTypeInformationRequest:
	default:
		return nil, errMessageType
	}

	b, err := bootFor6(cfg, req)
	if err != nil {
		return nil, err
	}

	reply := newReply6(cfg, req, mt)

	// An ADVERTISE carries no IA_NA at all: EDK2's DHCPv6 driver drops an ADVERTISE
	// whose IA holds a status other than Success (Dhcp6SeekStsOption), and its PXE and
	// HTTP boot drivers take one without an address as a proxy offer, to pair with the
	// site's address offer. A REPLY (to a REQUEST sent to us) says why each IA is empty,
	// as RFC 8415 18.3.2 asks.
	if req.MessageType == dhcpv6.MessageTypeRequest {
		for _, ia := range iaNAs(req) {
			reply.AddOption(&dhcpv6.OptIANA{
				IaId: ia.IaId,
				Options: dhcpv6.IdentityOptions{Options: dhcpv6.Options{&dhcpv6.OptStatusCode{
					StatusCode: iana.StatusNoAddrsAvail, StatusMessage: "boot server only: addresses come from the site",
				}}},
			})
		}
	}

	addBootOptions6(reply, &b, true)

	return reply, nil
}

// answerFullMode6 answers every client on a network without another DHCPv6 server: each
// IA_NA gets the address hashed from the client's DUID and IAID, so that no state is
// kept and a restart changes no address.
func answerFullMode6(cfg *DHCPv6Config, req *dhcpv6.Message) (*dhcpv6.Message, error) {
	pool := cfg.Pool

	var (
		mt        = dhcpv6.MessageTypeReply
		addresses = true
		rapid     bool
	)

	switch req.MessageType {
	case dhcpv6.MessageTypeSolicit:
		mt = dhcpv6.MessageTypeAdvertise
		if req.GetOneOption(dhcpv6.OptionRapidCommit) != nil {
			mt, rapid = dhcpv6.MessageTypeReply, true
		}
	case dhcpv6.MessageTypeRequest, dhcpv6.MessageTypeRenew, dhcpv6.MessageTypeRebind:
	case dhcpv6.MessageTypeInformationRequest:
		addresses = false
	case dhcpv6.MessageTypeRelease, dhcpv6.MessageTypeDecline:
		// No lease is kept, so there is nothing to free; a declined address (someone
		// else holds it) would be hashed the same again, which only the operator can fix.
		reply := newReply6(cfg, req, dhcpv6.MessageTypeReply)
		reply.AddOption(&dhcpv6.OptStatusCode{StatusCode: iana.StatusSuccess})

		return reply, nil
	case dhcpv6.MessageTypeConfirm:
		return confirm6(cfg, req)
	default:
		return nil, errMessageType
	}

	// A client that is not booting, or cannot be booted, still gets its address (the
	// server tells the operator of the latter).
	b, bootErr := bootFor6(cfg, req)
	booting := bootErr == nil

	ias := iaNAs(req)
	if addresses && len(ias) == 0 && !booting {
		return nil, errNoIANA6
	}

	reply := newReply6(cfg, req, mt)
	if rapid {
		reply.AddOption(&dhcpv6.OptionGeneric{OptionCode: dhcpv6.OptionRapidCommit})
	}

	if addresses {
		clientID := req.GetOneOption(dhcpv6.OptionClientID).ToBytes()
		for _, ia := range ias {
			reply.AddOption(leaseIA6(cfg, clientID, ia, mt == dhcpv6.MessageTypeReply))
		}
	}

	if len(pool.DNS) > 0 {
		ips := make([]net.IP, len(pool.DNS))
		for i, a := range pool.DNS {
			ips[i] = net.IP(a.AsSlice())
		}

		reply.AddOption(dhcpv6.OptDNS(ips...))
	}

	if booting {
		addBootOptions6(reply, &b, false)
	}

	return reply, nil
}

// leaseIA6 is the IA_NA of the reply: the client's address with its lifetimes and, in a
// REPLY, any other address the client listed with zero lifetimes, so that it drops
// addresses this server does not give (RFC 8415 18.3.4).
func leaseIA6(cfg *DHCPv6Config, clientID []byte, ia *dhcpv6.OptIANA, isReply bool) *dhcpv6.OptIANA {
	pool := cfg.Pool
	addr := address6(cfg, clientID, ia.IaId)

	out := &dhcpv6.OptIANA{
		IaId: ia.IaId,
		T1:   pool.PreferredLifetime / 2,
		T2:   pool.PreferredLifetime * 4 / 5,
	}
	out.Options.Add(&dhcpv6.OptIAAddress{
		IPv6Addr:          net.IP(addr.AsSlice()),
		PreferredLifetime: pool.PreferredLifetime,
		ValidLifetime:     pool.ValidLifetime,
	})

	if !isReply {
		return out
	}

	for _, opt := range ia.Options.Get(dhcpv6.OptionIAAddr) {
		a, ok := opt.(*dhcpv6.OptIAAddress)
		if !ok {
			continue
		}

		if ip, ok := netip.AddrFromSlice(a.IPv6Addr); ok && ip.Unmap() != addr {
			out.Options.Add(&dhcpv6.OptIAAddress{IPv6Addr: a.IPv6Addr})
		}
	}

	return out
}

// confirm6 answers a CONFIRM: Success when every address the client lists is in the
// prefix, NotOnLink otherwise; no reply when it lists none (RFC 8415 18.3.3).
func confirm6(cfg *DHCPv6Config, req *dhcpv6.Message) (*dhcpv6.Message, error) {
	var n int

	status := iana.StatusSuccess

	for _, ia := range iaNAs(req) {
		for _, opt := range ia.Options.Get(dhcpv6.OptionIAAddr) {
			a, ok := opt.(*dhcpv6.OptIAAddress)
			if !ok {
				continue
			}

			n++

			if ip, ok := netip.AddrFromSlice(a.IPv6Addr); !ok || !cfg.Pool.Prefix.Contains(ip.Unmap()) {
				status = iana.StatusNotOnLink
			}
		}
	}

	if n == 0 {
		return nil, errNoIANA6
	}

	reply := newReply6(cfg, req, dhcpv6.MessageTypeReply)
	reply.AddOption(&dhcpv6.OptStatusCode{StatusCode: status})

	return reply, nil
}

// address6 is the address of one IA of one client: the prefix and 64 bits of
// sha256(DUID, IAID), hashed again (with a counter) when they land on an interface ID
// that cannot be given: ::0 (the subnet-router anycast), ::1, the reserved subnet
// anycast IDs (RFC 5453) or the server's own address.
func address6(cfg *DHCPv6Config, clientID []byte, iaid [4]byte) netip.Addr {
	prefix := cfg.Pool.Prefix.Masked().Addr().As16()

	h := sha256.New()

	for i := byte(0); ; i++ {
		h.Reset()
		h.Write(clientID)
		h.Write(iaid[:])

		if i > 0 {
			h.Write([]byte{i})
		}

		sum := h.Sum(nil)
		id := binary.BigEndian.Uint64(sum[:8])

		if id <= 1 || id >= 0xfdff_ffff_ffff_ff80 {
			continue
		}

		a := prefix
		binary.BigEndian.PutUint64(a[8:], id)

		if addr := netip.AddrFrom16(a); addr != cfg.ServerAddr {
			return addr
		}
	}
}

// iaNAs returns the IA_NA options of a request.
func iaNAs(req *dhcpv6.Message) []*dhcpv6.OptIANA {
	var ias []*dhcpv6.OptIANA

	for _, opt := range req.GetOption(dhcpv6.OptionIANA) {
		if ia, ok := opt.(*dhcpv6.OptIANA); ok {
			ias = append(ias, ia)
		}
	}

	return ias
}

// newReply6 starts a reply: the transaction ID, the server ID and the client's ID echoed.
func newReply6(cfg *DHCPv6Config, req *dhcpv6.Message, mt dhcpv6.MessageType) *dhcpv6.Message {
	reply := &dhcpv6.Message{MessageType: mt, TransactionID: req.TransactionID}

	reply.AddOption(dhcpv6.OptServerID(cfg.ServerDUID))

	if cid := req.GetOneOption(dhcpv6.OptionClientID); cid != nil {
		reply.AddOption(cid)
	}

	return reply
}

// answerRelay6 answers a RELAY-FORW holding a client's message (one relay, not nested)
// with a RELAY-REPL holding the answer, and returns the inner request for logging. In
// full mode, a relay on another link is not answered: the pool is this link's.
func answerRelay6(cfg *DHCPv6Config, relay *dhcpv6.RelayMessage) (*dhcpv6.RelayMessage, *dhcpv6.Message, error) {
	if relay.MessageType != dhcpv6.MessageTypeRelayForward {
		return nil, nil, errMessageType
	}

	inner := relay.Options.RelayMessage()
	if inner == nil {
		return nil, nil, fmt.Errorf("%w: RELAY-FORW without a relay message", ErrMalformed)
	}

	req, ok := inner.(*dhcpv6.Message)
	if !ok {
		return nil, nil, errRelayNested6
	}

	if cfg.Pool != nil {
		link, ok := netip.AddrFromSlice(relay.LinkAddr)
		if !ok || !cfg.Pool.Prefix.Contains(link.Unmap()) {
			return nil, req, errRelayLink6
		}
	}

	reply, err := answer6(cfg, req)
	if err != nil {
		return nil, req, err
	}

	out := &dhcpv6.RelayMessage{
		MessageType: dhcpv6.MessageTypeRelayReply,
		HopCount:    relay.HopCount,
		LinkAddr:    relay.LinkAddr,
		PeerAddr:    relay.PeerAddr,
	}

	if iid := relay.GetOneOption(dhcpv6.OptionInterfaceID); iid != nil {
		out.AddOption(iid)
	}

	out.AddOption(dhcpv6.OptRelayMessage(reply))

	return out, req, nil
}
