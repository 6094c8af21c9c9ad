package stormbench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"golang.org/x/sys/unix"
)

// dhcpPorts are the client, server and PXE boot server ports.
const (
	clientPort = 68
	serverPort = 67
	bootPort   = 4011
)

// dhcpConn is the one DHCP socket every simulated machine shares: a client namespace
// holds one interface, so the machines differ by chaddr (and transaction ID), not by
// socket. One reader hands each reply to the machine waiting on its transaction ID.
type dhcpConn struct {
	conn *net.UDPConn

	mu      sync.Mutex
	waiting map[dhcpv4.TransactionID]chan *dhcpv4.DHCPv4
}

// listenDHCP opens the shared socket on port 68 of iface, broadcasts allowed; the
// reader runs until ctx ends (which closes the socket).
func listenDHCP(ctx context.Context, iface string) (*dhcpConn, error) {
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error

		err := rc.Control(func(fd uintptr) {
			s := int(fd)
			for _, o := range [][2]int{{unix.SO_BROADCAST, 1}, {unix.SO_REUSEADDR, 1}, {unix.SO_RCVBUF, 8 << 20}} {
				if serr = unix.SetsockoptInt(s, unix.SOL_SOCKET, o[0], o[1]); serr != nil {
					return
				}
			}
			// Broadcasts leave by this interface: the namespace has no default route.
			serr = unix.SetsockoptString(s, unix.SOL_SOCKET, unix.SO_BINDTODEVICE, iface)
		})

		return errors.Join(err, serr)
	}}

	pc, err := lc.ListenPacket(ctx, "udp4", fmt.Sprintf("0.0.0.0:%d", clientPort))
	if err != nil {
		return nil, fmt.Errorf("error opening the DHCP client socket on %s: %w", iface, err)
	}

	d := &dhcpConn{conn: pc.(*net.UDPConn), waiting: map[dhcpv4.TransactionID]chan *dhcpv4.DHCPv4{}} //nolint:forcetypeassert // udp4 gives a UDPConn

	context.AfterFunc(ctx, func() { d.conn.Close() })

	go d.read()

	return d, nil
}

func (d *dhcpConn) read() {
	buf := make([]byte, 4096)

	for {
		n, _, err := d.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}

			continue
		}

		p, err := dhcpv4.FromBytes(buf[:n])
		if err != nil || p.OpCode != dhcpv4.OpcodeBootReply {
			continue // not for us: other servers' noise on the segment
		}

		d.mu.Lock()
		ch := d.waiting[p.TransactionID]
		d.mu.Unlock()

		if ch != nil {
			select {
			case ch <- p:
			default: // the machine has what it needs; duplicates go
			}
		}
	}
}

func (d *dhcpConn) register(xid dhcpv4.TransactionID) chan *dhcpv4.DHCPv4 {
	ch := make(chan *dhcpv4.DHCPv4, 16)

	d.mu.Lock()
	d.waiting[xid] = ch
	d.mu.Unlock()

	return ch
}

func (d *dhcpConn) unregister(xid dhcpv4.TransactionID) {
	d.mu.Lock()
	delete(d.waiting, xid)
	d.mu.Unlock()
}

func (d *dhcpConn) send(p *dhcpv4.DHCPv4, to netip.AddrPort) error {
	if _, err := d.conn.WriteToUDPAddrPort(p.ToBytes(), to); err != nil {
		return fmt.Errorf("error sending DHCP %s: %w", p.MessageType(), err)
	}

	return nil
}

// bootInfo is what one DHCP exchange gave a machine.
type bootInfo struct {
	Lease   net.IP // from the site server
	File    string // boot file: TFTP name, or the script URL for iPXE
	Server  net.IP // TFTP server (siaddr of the proxy's answer)
	Retrans int    // DISCOVERs and REQUESTs sent again
	// NoSite, NoProxy count DISCOVERs sent again for want of the site server's offer,
	// and of the proxy's: which server the retransmissions wait for.
	NoSite, NoProxy int
	ProxyACK        bool // the proxy answered the PXE boot server request (port 4011)
}

// maxNAKs bounds the DISCOVERs a machine starts over after a NAK (machine.xid has room
// for 4).
const maxNAKs = 4

var (
	broadcastAddr = netip.AddrPortFrom(netip.AddrFrom4([4]byte{255, 255, 255, 255}), serverPort)
	pxeClass      = []byte("PXEClient")
)

// exchange does what PXE firmware (ipxe false) or iPXE (true) does on DHCP: DISCOVER
// until both the site server's and the ProxyDHCP's offers are in, REQUEST the site's
// address, then (iPXE) ask the proxy's boot server port for the boot file. Waits double
// from first, up to tries times per step.
func (d *dhcpConn) exchange(ctx context.Context, m machine, ipxe bool, first time.Duration, tries int) (bootInfo, error) {
	var info bootInfo

	mods := m.pxeOptions(ipxe)

	var (
		site, proxy *dhcpv4.DHCPv4
		xid         dhcpv4.TransactionID
		replies     chan *dhcpv4.DHCPv4
	)

	// A NAK (the site server offered the address to another machine too) starts over
	// with a DISCOVER of a new transaction, as RFC 2131 has it: late answers of the old
	// one then match nothing.
	for naks := 0; info.Lease == nil; naks++ {
		if naks == maxNAKs {
			return info, fmt.Errorf("the site server refused (NAK) %d REQUESTs", naks)
		}

		if replies != nil {
			d.unregister(xid)
			info.Retrans++
		}

		xid = m.xid(ipxe, naks)
		replies = d.register(xid)
		site, proxy = nil, nil

		disc, err := dhcpv4.New(append([]dhcpv4.Modifier{
			dhcpv4.WithTransactionID(xid), dhcpv4.WithHwAddr(m.MAC), dhcpv4.WithBroadcast(true),
			dhcpv4.WithMessageType(dhcpv4.MessageTypeDiscover),
		}, mods...)...)
		if err != nil {
			d.unregister(xid)

			return info, fmt.Errorf("error building the DISCOVER: %w", err)
		}

		if err := d.discover(ctx, replies, disc, first, tries, &info, &site, &proxy); err != nil {
			d.unregister(xid)

			return info, err
		}

		if err := d.request(ctx, m, xid, replies, site, mods, first, tries, &info); err != nil {
			d.unregister(xid)

			return info, err
		}
	}

	defer d.unregister(xid)

	info.File, info.Server = bootFile(proxy), proxy.ServerIPAddr

	switch item, menu := firstBootItem(proxy); {
	case info.File == "" && menu:
		// A PXE boot menu instead of a file (dnsmasq's proxy): boot server discovery,
		// as firmware and iPXE do — a REQUEST for the first item to port 4011.
		ack, err := d.proxyRequest(ctx, m, xid, info.Lease, proxy, replies, mods, item, first, tries, &info.Retrans)
		if err != nil {
			return info, fmt.Errorf("boot server discovery: %w", err)
		}

		info.ProxyACK = true
		info.File = bootFile(ack)

		if !ack.ServerIPAddr.IsUnspecified() {
			info.Server = ack.ServerIPAddr
		}
	case ipxe:
		// iPXE asks the proxy's boot server port after the lease and falls back to the
		// offer when no answer comes (iPXE's dhcp.c, "ProxyDHCP REQUEST").
		if ack, err := d.proxyRequest(ctx, m, xid, info.Lease, proxy, replies, mods, nil, time.Second, 1, nil); err == nil {
			info.ProxyACK = true

			if f := bootFile(ack); f != "" {
				info.File = f
			}
		}
	}

	if info.File == "" {
		return info, errors.New("the proxy's offer names no boot file")
	}

	if info.Server == nil || info.Server.IsUnspecified() {
		info.Server = proxy.ServerIdentifier()
	}

	return info, nil
}

// proxyRequest sends a REQUEST to the proxy's PXE boot server port (4011), with a boot
// item (PXE option 43 sub-option 71) when one is given, from the machine's lease
// (ciaddr), and waits for its ACK. Answers to the leases reach the client namespace,
// which holds the site range as local addresses.
func (d *dhcpConn) proxyRequest(ctx context.Context, m machine, xid dhcpv4.TransactionID, lease net.IP, proxy *dhcpv4.DHCPv4,
	replies chan *dhcpv4.DHCPv4, mods []dhcpv4.Modifier, item []byte, first time.Duration, tries int, retrans *int,
) (*dhcpv4.DHCPv4, error) {
	srv, ok := netip.AddrFromSlice(proxy.ServerIdentifier().To4())
	if !ok {
		return nil, errors.New("the proxy's offer has no server identifier")
	}

	extra := []dhcpv4.Modifier{
		dhcpv4.WithTransactionID(xid), dhcpv4.WithHwAddr(m.MAC),
		dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
		dhcpv4.WithOption(dhcpv4.OptServerIdentifier(proxy.ServerIdentifier())),
		dhcpv4.WithClientIP(lease),
	}

	if item != nil {
		// Sub-option 71 (boot item): type and layer, 4 bytes.
		extra = append(extra, dhcpv4.WithGeneric(dhcpv4.OptionVendorSpecificInformation, append([]byte{71, 4}, append(item[:4], 255)...)))
	}

	req, err := dhcpv4.New(append(extra, mods...)...)
	if err != nil {
		return nil, fmt.Errorf("error building the boot server REQUEST: %w", err)
	}

	var ack *dhcpv4.DHCPv4

	if retrans == nil {
		retrans = new(int)
	}

	err = d.retry(ctx, replies, first, tries, retrans, func() error { return d.send(req, netip.AddrPortFrom(srv, bootPort)) },
		func(p *dhcpv4.DHCPv4) bool {
			// The site server's ACK has its own identifier; dnsmasq's proxy ACK echoes
			// the lease as yiaddr, Anvil's leaves it empty.
			if p.MessageType() == dhcpv4.MessageTypeAck && p.ServerIdentifier().Equal(proxy.ServerIdentifier()) {
				ack = p

				return true
			}

			return false
		})

	return ack, err
}

// firstBootItem reads a PXE boot menu (option 43 sub-option 9) and returns the boot
// item of its first entry: its type and layer 0.
func firstBootItem(p *dhcpv4.DHCPv4) ([]byte, bool) {
	opts := p.Options.Get(dhcpv4.OptionVendorSpecificInformation)

	for len(opts) >= 2 && opts[0] != 255 {
		code, n := opts[0], int(opts[1])
		if len(opts) < 2+n {
			return nil, false
		}

		if code == 9 && n >= 3 {
			return []byte{opts[2], opts[3], 0, 0}, true
		}

		opts = opts[2+n:]
	}

	return nil, false
}

// retry sends, then waits for replies until done says so; on a timeout it sends again
// with twice the wait, tries times in all.
func (d *dhcpConn) retry(ctx context.Context, replies chan *dhcpv4.DHCPv4, first time.Duration, tries int, retrans *int,
	send func() error, done func(*dhcpv4.DHCPv4) bool,
) error {
	wait := first

	for try := range tries {
		if try > 0 {
			*retrans++
		}

		if err := send(); err != nil {
			return err
		}

		timer := time.NewTimer(wait)

	collect:
		for {
			select {
			case p := <-replies:
				if done(p) {
					timer.Stop()

					return nil
				}
			case <-timer.C:
				break collect
			case <-ctx.Done():
				timer.Stop()

				return fmt.Errorf("interrupted: %w", ctx.Err())
			}
		}

		wait *= 2
	}

	return fmt.Errorf("no answer after %d tries", tries)
}

// bootFile is the boot file of an answer: option 67, else the BOOTP header's.
func bootFile(p *dhcpv4.DHCPv4) string {
	if f := p.BootFileNameOption(); f != "" {
		return f
	}

	return p.BootFileName
}
