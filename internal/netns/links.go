package netns

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"

	"github.com/jsimonetti/rtnetlink/v2"
	"github.com/jsimonetti/rtnetlink/v2/driver"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Links changes the links of one namespace over rtnetlink. Every Add is idempotent: a
// link or address that exists is kept, so a lab can be brought up again over itself.
type Links struct {
	ns   string
	conn *rtnetlink.Conn
}

// OpenLinks opens the links of namespace ns; Close releases them.
func OpenLinks(ns string) (*Links, error) {
	if !Exists(ns) {
		return nil, fmt.Errorf("no network namespace %q", ns)
	}

	f, err := os.Open(Path(ns))
	if err != nil {
		return nil, fmt.Errorf("error opening network namespace %s: %w", ns, err)
	}

	defer f.Close() // the socket stays in the namespace without it

	conn, err := rtnetlink.Dial(&netlink.Config{NetNS: int(f.Fd())})
	if err != nil {
		return nil, fmt.Errorf("error opening rtnetlink in network namespace %s: %w", ns, err)
	}

	return &Links{ns: ns, conn: conn}, nil
}

// Close closes the rtnetlink connection.
func (l *Links) Close() error {
	if err := l.conn.Close(); err != nil {
		return fmt.Errorf("error closing rtnetlink in network namespace %s: %w", l.ns, err)
	}

	return nil
}

// find is the link called name, if there is one.
func (l *Links) find(name string) (rtnetlink.LinkMessage, bool, error) {
	links, err := l.conn.Link.List()
	if err != nil {
		return rtnetlink.LinkMessage{}, false, fmt.Errorf("error listing the links of network namespace %s: %w", l.ns, err)
	}

	for _, link := range links {
		if link.Attributes != nil && link.Attributes.Name == name {
			return link, true, nil
		}
	}

	return rtnetlink.LinkMessage{}, false, nil
}

// index is the index of the link called name, which must exist.
func (l *Links) index(name string) (uint32, error) {
	link, ok, err := l.find(name)
	if err != nil {
		return 0, err
	}

	if !ok {
		return 0, fmt.Errorf("no link %s in network namespace %s", name, l.ns)
	}

	return link.Index, nil
}

// Exists reports whether the namespace has a link called name.
func (l *Links) Exists(name string) (bool, error) {
	_, ok, err := l.find(name)

	return ok, err
}

// Names lists the namespace's links.
func (l *Links) Names() ([]string, error) {
	links, err := l.conn.Link.List()
	if err != nil {
		return nil, fmt.Errorf("error listing the links of network namespace %s: %w", l.ns, err)
	}

	names := make([]string, 0, len(links))

	for _, link := range links {
		if link.Attributes != nil {
			names = append(names, link.Attributes.Name)
		}
	}

	return names, nil
}

// AddBridge creates a bridge called name. Multicast snooping is off: router
// advertisements and DHCP must reach every port, whoever joined a group.
func (l *Links) AddBridge(name string) error {
	off := driver.BridgeEnableDisabled

	return l.add(name, &rtnetlink.LinkInfo{Kind: "bridge", Data: &driver.Bridge{McastSnooping: &off}}, "bridge")
}

// AddVeth creates a veth pair: name in this namespace, peer in namespace peerNS.
func (l *Links) AddVeth(name, peer, peerNS string) error {
	if !Exists(peerNS) {
		return fmt.Errorf("error creating veth %s: no network namespace %q for its peer", name, peerNS)
	}

	f, err := os.Open(Path(peerNS))
	if err != nil {
		return fmt.Errorf("error opening network namespace %s: %w", peerNS, err)
	}

	defer f.Close()

	peerInfo := &rtnetlink.LinkMessage{
		Family:     unix.AF_UNSPEC,
		Attributes: &rtnetlink.LinkAttributes{Name: peer, NetNS: rtnetlink.NetNSForFD(uint32(f.Fd()))}, //nolint:gosec // a file descriptor: a small int
	}

	return l.add(name, &rtnetlink.LinkInfo{Kind: "veth", Data: &driver.Veth{PeerInfo: peerInfo}}, "veth")
}

func (l *Links) add(name string, info *rtnetlink.LinkInfo, what string) error {
	if ok, err := l.Exists(name); err != nil || ok {
		return err
	}

	err := l.conn.Link.New(&rtnetlink.LinkMessage{
		Family:     unix.AF_UNSPEC,
		Attributes: &rtnetlink.LinkAttributes{Name: name, Info: info},
	})
	if err != nil {
		return fmt.Errorf("error creating %s %s in network namespace %s: %w", what, name, l.ns, err)
	}

	return nil
}

// AddTap creates a persistent tap called name (no packet information header, as
// "ip tuntap add mode tap" makes it), for a QEMU in the namespace to open by name.
func (l *Links) AddTap(name string) error {
	if ok, err := l.Exists(name); err != nil || ok {
		return err
	}

	// A tap belongs to the namespace of the thread that opened /dev/net/tun.
	err := Do(l.ns, func() error {
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("error opening /dev/net/tun: %w", err)
		}

		defer unix.Close(fd) // the tap persists without it

		ifr, err := unix.NewIfreq(name)
		if err != nil {
			return fmt.Errorf("error naming the tap: %w", err)
		}

		ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI)

		if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			return fmt.Errorf("error creating the tap: %w", err)
		}

		if err := unix.IoctlSetInt(fd, unix.TUNSETPERSIST, 1); err != nil {
			return fmt.Errorf("error making the tap persistent: %w", err)
		}

		return nil
	})
	if err != nil {
		return fmt.Errorf("error creating tap %s in network namespace %s: %w", name, l.ns, err)
	}

	return nil
}

// SetMaster attaches link name to master (a bridge).
func (l *Links) SetMaster(name, master string) error {
	i, err := l.index(name)
	if err != nil {
		return err
	}

	m, err := l.index(master)
	if err != nil {
		return err
	}

	if err := l.conn.Link.SetMaster(i, m, nil); err != nil {
		return fmt.Errorf("error attaching %s to %s in network namespace %s: %w", name, master, l.ns, err)
	}

	return nil
}

// SetUp brings link name up.
func (l *Links) SetUp(name string) error {
	i, err := l.index(name)
	if err != nil {
		return err
	}

	err = l.conn.Link.Set(&rtnetlink.LinkMessage{Family: unix.AF_UNSPEC, Index: i, Flags: unix.IFF_UP, Change: unix.IFF_UP})
	if err != nil {
		return fmt.Errorf("error bringing %s up in network namespace %s: %w", name, l.ns, err)
	}

	return nil
}

// AddAddr gives link name the address p (address and prefix length). IPv6 addresses
// skip duplicate address detection, which would keep them unusable for a second or
// more on a link where only the lab's own hosts live.
func (l *Links) AddAddr(name string, p netip.Prefix) error {
	if !p.IsValid() {
		return fmt.Errorf("error adding an address to %s: %q is no address and prefix", name, p)
	}

	i, err := l.index(name)
	if err != nil {
		return err
	}

	addr := p.Addr()
	ip := net.IP(addr.AsSlice())
	msg := &rtnetlink.AddressMessage{
		Family:       unix.AF_INET,
		PrefixLength: uint8(p.Bits()), //nolint:gosec // at most 128
		Index:        i,
		Attributes:   &rtnetlink.AddressAttributes{Address: ip, Local: ip},
	}

	if addr.Is6() {
		msg.Family, msg.Flags, msg.Attributes.Flags = unix.AF_INET6, unix.IFA_F_NODAD, unix.IFA_F_NODAD
	}

	if err := l.conn.Address.New(msg); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("error adding %s to %s in network namespace %s: %w", p, name, l.ns, err)
	}

	return nil
}

// Addrs lists the addresses of link name.
func (l *Links) Addrs(name string) ([]netip.Prefix, error) {
	i, err := l.index(name)
	if err != nil {
		return nil, err
	}

	msgs, err := l.conn.Address.List()
	if err != nil {
		return nil, fmt.Errorf("error listing the addresses in network namespace %s: %w", l.ns, err)
	}

	var addrs []netip.Prefix

	for _, m := range msgs {
		if m.Index != i || m.Attributes == nil {
			continue
		}

		if a, ok := netip.AddrFromSlice(m.Attributes.Address); ok {
			addrs = append(addrs, netip.PrefixFrom(a.Unmap(), int(m.PrefixLength)))
		}
	}

	return addrs, nil
}

// Delete removes link name (with a veth, its peer too); a missing link is removed.
func (l *Links) Delete(name string) error {
	link, ok, err := l.find(name)
	if err != nil || !ok {
		return err
	}

	if err := l.conn.Link.Delete(link.Index); err != nil {
		return fmt.Errorf("error deleting %s in network namespace %s: %w", name, l.ns, err)
	}

	return nil
}
