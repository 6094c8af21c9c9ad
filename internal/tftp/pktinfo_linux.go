package tftp

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"strconv"

	"golang.org/x/sys/unix"
)

// enableDestination asks the kernel to say, with each datagram, the address it was sent
// to: a server listening on a wildcard address must answer from that address, or the
// client (which only accepts its server's) drops the reply.
func enableDestination(c *net.UDPConn) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return fmt.Errorf("error reaching the TFTP socket: %w", err)
	}

	var v4err, v6err error

	if err := rc.Control(func(fd uintptr) {
		v4err = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_PKTINFO, 1)
		v6err = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_RECVPKTINFO, 1)
	}); err != nil {
		return fmt.Errorf("error reaching the TFTP socket: %w", err)
	}

	// An IPv4 socket takes only the first, an IPv6-only one only the second.
	if v4err != nil && v6err != nil {
		return fmt.Errorf("error asking for packet destinations on the TFTP socket: %w", v4err)
	}

	return nil
}

// destination is the address a datagram was sent to, from its control messages, or the
// zero Addr when they do not say.
func destination(oob []byte) netip.Addr {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return netip.Addr{}
	}

	for _, m := range msgs {
		switch {
		case m.Header.Level == unix.IPPROTO_IP && m.Header.Type == unix.IP_PKTINFO && len(m.Data) >= unix.SizeofInet4Pktinfo:
			// struct in_pktinfo: ifindex (4), spec_dst (4), addr (4): addr is the destination.
			return netip.AddrFrom4([4]byte(m.Data[8:12]))
		case m.Header.Level == unix.IPPROTO_IPV6 && m.Header.Type == unix.IPV6_PKTINFO && len(m.Data) >= unix.SizeofInet6Pktinfo:
			// struct in6_pktinfo: addr (16), ifindex (4). A link-local address needs its
			// interface to be bound.
			a := netip.AddrFrom16([16]byte(m.Data[:16])).Unmap()
			if a.Is6() && a.IsLinkLocalUnicast() {
				a = a.WithZone(strconv.FormatUint(uint64(binary.NativeEndian.Uint32(m.Data[16:20])), 10))
			}

			return a
		}
	}

	return netip.Addr{}
}
