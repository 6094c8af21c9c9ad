package siderolink

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"

	"github.com/jsimonetti/rtnetlink/v2"
	"golang.org/x/sys/unix"
)

// linkIndex is the index of the link called name; errPeerGone when there is none.
func linkIndex(conn *rtnetlink.Conn, name string) (uint32, error) {
	links, err := conn.Link.List()
	if err != nil {
		return 0, fmt.Errorf("error listing links: %w", err)
	}

	for _, l := range links {
		if l.Attributes != nil && l.Attributes.Name == name {
			return l.Index, nil
		}
	}

	return 0, fmt.Errorf("no link %s: %w", name, errPeerGone)
}

// setAddress makes p the link's one global address: a re-provision may move the node to
// another address, and the old one must not linger (the maintenance API would answer on
// it). The address skips duplicate address detection: nobody else is on the link, and
// until DAD ends the address could be neither bound nor used.
func setAddress(conn *rtnetlink.Conn, index uint32, p netip.Prefix) error {
	msgs, err := conn.Address.List()
	if err != nil {
		return fmt.Errorf("error listing addresses: %w", err)
	}

	have := false

	for _, m := range msgs {
		if m.Index != index || m.Attributes == nil {
			continue
		}

		a, ok := netip.AddrFromSlice(m.Attributes.Address)
		if !ok || a.IsLinkLocalUnicast() {
			continue
		}

		if netip.PrefixFrom(a.Unmap(), int(m.PrefixLength)) == p {
			have = true

			continue
		}

		if err := conn.Address.Delete(&m); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("error removing the old address %s: %w", a, err)
		}
	}

	if have {
		return nil
	}

	ip := net.IP(p.Addr().AsSlice())
	msg := &rtnetlink.AddressMessage{
		Family:       unix.AF_INET6,
		PrefixLength: uint8(p.Bits()), //nolint:gosec // a valid prefix's length: at most 128
		Flags:        unix.IFA_F_NODAD | unix.IFA_F_PERMANENT,
		Scope:        unix.RT_SCOPE_UNIVERSE,
		Index:        index,
		Attributes:   &rtnetlink.AddressAttributes{Address: ip, Local: ip, Flags: unix.IFA_F_NODAD | unix.IFA_F_PERMANENT},
	}

	if p.Addr().Is4() {
		msg.Family = unix.AF_INET
	}

	if err := conn.Address.New(msg); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("error adding the address %s: %w", p, err)
	}

	return nil
}

// setUp brings the link up.
func setUp(conn *rtnetlink.Conn, index uint32) error {
	if err := conn.Link.Set(&rtnetlink.LinkMessage{Family: unix.AF_UNSPEC, Index: index, Flags: unix.IFF_UP, Change: unix.IFF_UP}); err != nil {
		return fmt.Errorf("error bringing the link up: %w", err)
	}

	return nil
}
