package labtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/iana"

	"github.com/anvil-metal/anvil/internal/netns"
)

// DHCPAnswer is an answer a DHCP probe got, and where it came from.
type DHCPAnswer struct {
	From  netip.AddrPort
	Reply *dhcpv4.DHCPv4
}

// PXEDiscover is the DISCOVER of a BIOS PXE client (SeaBIOS's iPXE ROM before it says
// it is iPXE) with hardware address mac and SMBIOS UUID uuid (16 bytes, or nil).
func PXEDiscover(mac net.HardwareAddr, uuid []byte) (*dhcpv4.DHCPv4, error) {
	mods := []dhcpv4.Modifier{
		dhcpv4.WithMessageType(dhcpv4.MessageTypeDiscover),
		dhcpv4.WithHwAddr(mac),
		dhcpv4.WithBroadcast(true),
		dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient:Arch:00000:UNDI:002001")),
		dhcpv4.WithOption(dhcpv4.OptClientArch(iana.INTEL_X86PC)),
	}

	if len(uuid) == 16 {
		mods = append(mods, dhcpv4.WithGeneric(dhcpv4.OptionClientMachineIdentifier, append([]byte{0}, uuid...)))
	}

	req, err := dhcpv4.New(mods...)
	if err != nil {
		return nil, fmt.Errorf("error making a DISCOVER: %w", err)
	}

	return req, nil
}

// DHCPProbe broadcasts req from the host's interface ifname, as a machine on the segment
// does (from port 68 to 255.255.255.255:67), and gathers every answer to it (its
// transaction ID) that arrives within wait: the site's DHCP server's and each ProxyDHCP's.
// Nothing else on the host may hold UDP port 68.
func (h SegmentHost) DHCPProbe(ctx context.Context, ifname string, req *dhcpv4.DHCPv4, wait time.Duration) ([]DHCPAnswer, error) {
	var conn net.PacketConn

	err := netns.Do(h.NS, func() error {
		lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
			var serr error

			err := c.Control(func(fd uintptr) {
				for _, opt := range []int{syscall.SO_BROADCAST, syscall.SO_REUSEADDR} {
					if serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, opt, 1); serr != nil {
						return
					}
				}

				serr = syscall.SetsockoptString(int(fd), syscall.SOL_SOCKET, syscall.SO_BINDTODEVICE, ifname)
			})
			if err != nil {
				return err
			}

			return serr
		}}

		var err error

		conn, err = lc.ListenPacket(ctx, "udp4", "0.0.0.0:68")

		return err
	})
	if err != nil {
		return nil, fmt.Errorf("error opening a DHCP client socket in %s: %w", h.NS, err)
	}
	defer conn.Close()

	if _, err := conn.WriteTo(req.ToBytes(), &net.UDPAddr{IP: net.IPv4bcast, Port: 67}); err != nil {
		return nil, fmt.Errorf("error broadcasting from %s: %w", h.NS, err)
	}

	deadline := time.Now().Add(wait)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}

	if err := conn.SetReadDeadline(deadline); err != nil {
		return nil, fmt.Errorf("error setting a deadline: %w", err)
	}

	var answers []DHCPAnswer

	buf := make([]byte, 1500)

	for {
		n, from, err := conn.ReadFrom(buf)

		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return answers, nil
		}

		if err != nil {
			return answers, fmt.Errorf("error reading DHCP answers in %s: %w", h.NS, err)
		}

		reply, err := dhcpv4.FromBytes(buf[:n])
		if err != nil || reply.TransactionID != req.TransactionID || reply.OpCode != dhcpv4.OpcodeBootReply {
			continue
		}

		udp, ok := from.(*net.UDPAddr)
		if !ok {
			continue
		}

		ap := udp.AddrPort()
		answers = append(answers, DHCPAnswer{From: netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), Reply: reply})
	}
}
