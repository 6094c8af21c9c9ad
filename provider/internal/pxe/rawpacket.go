package pxe

import (
	"bytes"
	"errors"
	"net"
	"net/netip"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// The ProxyDHCP answers PXE clients by reading their request where it lies and writing
// the reply into a buffer of the reading loop: decoding into a dhcpv4.DHCPv4 (a map of
// options, a slice per option and per address) and encoding the reply cost twice the CPU
// of dnsmasq per answer. The replies are byte for byte those of answer(...).ToBytes();
// a request this reader does not take (see parse) goes the decoding way.

// BOOTP header layout (RFC 951, RFC 2131): offsets of the fields the proxy reads.
const (
	offOp      = 0
	offHType   = 1
	offHLen    = 2
	offXID     = 4
	offFlags   = 10
	offCIAddr  = 12
	offGIAddr  = 24
	offCHAddr  = 28
	offOptions = 240 // after sname (64), file (128) and the magic cookie (4)

	chaddrLen  = 16
	snameLen   = 64
	fileLen    = 128
	minReplyLn = 300 // BOOTP's minimum, which dhcpv4's ToBytes pads to
)

var magicCookie = [4]byte{99, 130, 83, 99}

// The request options the proxy reads, by slot.
const (
	slotMessageType = iota
	slotServerID
	slotVendorClass
	slotClientID
	slotUserClass
	slotRelayInfo
	slotArch
	slotGUID
	numSlots
)

func optionSlot(code byte) int {
	switch code {
	case dhcpv4.OptionDHCPMessageType.Code():
		return slotMessageType
	case dhcpv4.OptionServerIdentifier.Code():
		return slotServerID
	case dhcpv4.OptionClassIdentifier.Code():
		return slotVendorClass
	case dhcpv4.OptionClientIdentifier.Code():
		return slotClientID
	case dhcpv4.OptionUserClassInformation.Code():
		return slotUserClass
	case dhcpv4.OptionRelayAgentInformation.Code():
		return slotRelayInfo
	case dhcpv4.OptionClientSystemArchitectureType.Code():
		return slotArch
	case dhcpv4.OptionClientMachineIdentifier.Code():
		return slotGUID
	default:
		return -1
	}
}

// rawRequest is a DHCP request read in place: the options slices point into the packet.
type rawRequest struct {
	pkt  []byte
	hlen int
	// opts holds the options of the slots, nil when absent or empty (as
	// dhcpv4.Options.Get says for both).
	opts [numSlots][]byte
	seen [numSlots]bool
}

// parse reads pkt and reports whether it took it: only when dhcpv4.FromBytes would
// decode it to the same fields and options. It leaves to FromBytes what needs more
// (options repeated, which RFC 3396 concatenates) and what FromBytes refuses.
func (r *rawRequest) parse(pkt []byte) bool {
	if len(pkt) < offOptions || [4]byte(pkt[offOptions-4:offOptions]) != magicCookie {
		return false
	}

	r.pkt = pkt
	r.hlen = min(int(pkt[offHLen]), chaddrLen)

	opts := pkt[offOptions:]
	if len(opts) == 0 {
		return true // FromBytes takes a packet without options
	}

	for i := 0; i < len(opts); {
		code := opts[i]

		switch code {
		case 0: // pad
			i++

			continue
		case 255: // end: what follows is ignored
			return true
		}

		if i+2 > len(opts) {
			return false
		}

		n := int(opts[i+1])
		if i+2+n > len(opts) {
			return false
		}

		if slot := optionSlot(code); slot >= 0 {
			if r.seen[slot] {
				return false
			}

			r.seen[slot] = true

			if n > 0 {
				r.opts[slot] = opts[i+2 : i+2+n : i+2+n]
			}
		}

		i += 2 + n
	}

	return false // no end option: FromBytes refuses it
}

func (r *rawRequest) opCode() dhcpv4.OpcodeType { return dhcpv4.OpcodeType(r.pkt[offOp]) }

func (r *rawRequest) hwAddr() []byte { return r.pkt[offCHAddr : offCHAddr+r.hlen] }

// messageType is dhcpv4's MessageType(): none unless option 53 is one byte.
func (r *rawRequest) messageType() dhcpv4.MessageType {
	if v := r.opts[slotMessageType]; len(v) == 1 {
		return dhcpv4.MessageType(v[0])
	}

	return dhcpv4.MessageTypeNone
}

// answerRaw is answer for a request read in place, its reply appended to out[:0].
func answerRaw(cfg *Config, req *rawRequest, bootPort bool, out []byte) ([]byte, dhcpv4.MessageType, error) {
	if cfg.serverIP == nil {
		return nil, 0, errors.New("pxe: Config not validated")
	}

	if req.opCode() != dhcpv4.OpcodeBootRequest {
		return nil, 0, errNotBootRequest
	}

	var mt dhcpv4.MessageType

	switch req.messageType() {
	case dhcpv4.MessageTypeDiscover:
		mt = dhcpv4.MessageTypeOffer
	case dhcpv4.MessageTypeRequest:
		if !bootPort && !bytes.Equal(req.opts[slotServerID], cfg.serverIP.To4()) {
			return nil, 0, errNotForUs
		}

		mt = dhcpv4.MessageTypeAck
	default:
		return nil, 0, errMessageType
	}

	b, err := bootFor(cfg, bootOptions{
		vendorClass: req.opts[slotVendorClass], arch: req.opts[slotArch], userClass: req.opts[slotUserClass],
		guid: req.opts[slotGUID], mac: req.hwAddr(),
	})
	if err != nil {
		return nil, 0, err
	}

	if cap(out) == 0 {
		out = make([]byte, 0, 512) // one allocation for the common reply
	}

	return appendReply(out[:0], cfg, req, mt, &b), mt, nil
}

// appendReply appends what newReply and addBootOptions build, as ToBytes encodes it:
// options in code order, relay agent information (82) last, then end and padding.
func appendReply(out []byte, cfg *Config, req *rawRequest, mt dhcpv4.MessageType, b *Boot) []byte {
	p := req.pkt
	file := b.File
	server := cfg.serverIP.To4()

	out = append(out, byte(dhcpv4.OpcodeBootReply), p[offHType], min(p[offHLen], chaddrLen), 0)
	out = append(out, p[offXID:offXID+4]...)
	out = append(out, 0, 0) // secs
	out = append(out, p[offFlags:offFlags+2]...)

	if mt == dhcpv4.MessageTypeAck {
		out = append(out, p[offCIAddr:offCIAddr+4]...)
	} else {
		out = append(out, 0, 0, 0, 0)
	}

	out = append(out, 0, 0, 0, 0) // yiaddr: never an address
	out = append(out, server...)
	out = append(out, p[offGIAddr:offGIAddr+4]...)

	out = append(out, req.hwAddr()...)
	out = appendZeros(out, chaddrLen-req.hlen)

	name := cfg.serverName[:min(len(cfg.serverName), snameLen-1)]
	out = append(out, name...)
	out = appendZeros(out, snameLen-len(name))

	// The BOOTP file field holds 127 bytes; a longer script URL goes in option 67 only.
	if len(file) < fileLen {
		out = append(out, file...)
		out = appendZeros(out, fileLen-len(file))
	} else {
		out = appendZeros(out, fileLen)
	}

	out = append(out, magicCookie[:]...)

	if !b.HTTP {
		out = appendOption(out, dhcpv4.OptionVendorSpecificInformation, pxeDiscoveryControl)
	}

	out = append(out, dhcpv4.OptionDHCPMessageType.Code(), 1, byte(mt))
	out = appendOption(out, dhcpv4.OptionServerIdentifier, server)
	out = appendOption(out, dhcpv4.OptionClassIdentifier, b.vendorClass())

	// RFC 3046: relay agent information comes back; RFC 6842: so does the client ID.
	if v := req.opts[slotClientID]; v != nil {
		out = appendOption(out, dhcpv4.OptionClientIdentifier, v)
	}

	out = appendStringOption(out, dhcpv4.OptionTFTPServerName, cfg.serverName)
	out = appendStringOption(out, dhcpv4.OptionBootfileName, file)

	if v := req.opts[slotGUID]; v != nil {
		out = appendOption(out, dhcpv4.OptionClientMachineIdentifier, v)
	}

	if v := req.opts[slotRelayInfo]; v != nil {
		out = appendOption(out, dhcpv4.OptionRelayAgentInformation, v)
	}

	out = append(out, dhcpv4.OptionEnd.Code())

	return appendZeros(out, minReplyLn-len(out))
}

// appendOption encodes an option as dhcpv4's Options.Marshal does: a value longer than
// 255 bytes is split over several options of the same code, an empty one is code and 0.
func appendOption(out []byte, code dhcpv4.OptionCode, v []byte) []byte {
	if len(v) == 0 {
		return append(out, code.Code(), 0)
	}

	for len(v) > 0 {
		n := min(len(v), 255)
		out = append(out, code.Code(), byte(n))
		out = append(out, v[:n]...)
		v = v[n:]
	}

	return out
}

func appendStringOption(out []byte, code dhcpv4.OptionCode, s string) []byte {
	if len(s) == 0 {
		return append(out, code.Code(), 0)
	}

	for len(s) > 0 {
		n := min(len(s), 255)
		out = append(out, code.Code(), byte(n))
		out = append(out, s[:n]...)
		s = s[n:]
	}

	return out
}

func appendZeros(out []byte, n int) []byte {
	for range n {
		out = append(out, 0)
	}

	return out
}

// replyToRaw is ReplyTo for a request read in place.
func replyToRaw(cfg *Config, req *rawRequest, src netip.AddrPort, bootPort bool) netip.AddrPort {
	serverPort := uint16(cfg.dhcpPort()) //nolint:gosec // Validate keeps it ≤ 65535
	clientPort := serverPort + 1

	if bootPort {
		return src
	}

	if ip := netip.AddrFrom4([4]byte(req.pkt[offGIAddr : offGIAddr+4])); !ip.IsUnspecified() {
		return netip.AddrPortFrom(ip, serverPort)
	}

	if ip := netip.AddrFrom4([4]byte(req.pkt[offCIAddr : offCIAddr+4])); !ip.IsUnspecified() {
		return netip.AddrPortFrom(ip, clientPort)
	}

	return netip.AddrPortFrom(broadcast, clientPort)
}

// macString is net.HardwareAddr.String with one allocation for the common 6 bytes.
func macString(hw []byte) string {
	const hexDigits = "0123456789abcdef"

	if len(hw) != 6 {
		if len(hw) == 0 {
			return ""
		}

		return net.HardwareAddr(hw).String()
	}

	var buf [17]byte

	for i, b := range hw {
		if i > 0 {
			buf[i*3-1] = ':'
		}

		buf[i*3] = hexDigits[b>>4]
		buf[i*3+1] = hexDigits[b&0xf]
	}

	return string(buf[:])
}
