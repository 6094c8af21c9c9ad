package pxe

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"slices"
	"strconv"
	"syscall"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/iana"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// DHCPv6 ports (RFC 8415 7.2): servers and relays listen on 547, clients on 546. EDK2
// PXE firmware asks a proxy offer's boot server on 4011, from 4011.
const (
	dhcpv6ServerPort = 547
	dhcpv6ClientPort = 546
	dhcpv6BootPort   = 4011
)

// allDHCPRelayAgentsAndServers is where clients send (RFC 8415 7.1).
var allDHCPRelayAgentsAndServers = netip.MustParseAddr("ff02::1:2")

// DHCPv6 is the DHCPv6 boot server: boot URLs for UEFI PXE, UEFI HTTP boot and iPXE
// clients over IPv6 and, in full mode, addresses for every client.
type DHCPv6 struct {
	cfg      DHCPv6Config
	iface    *net.Interface
	logger   *zap.Logger
	unserved *unservedLog

	dhcp *dhcpv6Counters
	boot *dhcpv6Counters
}

// dhcpv6Counters are one port's counters.
type dhcpv6Counters struct {
	*dhcpCounters

	advertise prometheus.Counter
	reply     prometheus.Counter
	relayRepl prometheus.Counter
}

func newDHCPv6Counters(m *Metrics, server string) *dhcpv6Counters {
	c := m.dhcp(server)
	for _, e := range dhcpv6IgnoreErrors {
		c.m.ignored.WithLabelValues(server, e.reason)
	}

	return &dhcpv6Counters{
		dhcpCounters: c,
		advertise:    c.m.answered.WithLabelValues(server, "advertise"),
		reply:        c.m.answered.WithLabelValues(server, "reply"),
		relayRepl:    c.m.answered.WithLabelValues(server, "relay_reply"),
	}
}

func (c *dhcpv6Counters) answered(mt dhcpv6.MessageType, relayed bool) {
	switch {
	case relayed:
		c.relayRepl.Inc()
	case mt == dhcpv6.MessageTypeAdvertise:
		c.advertise.Inc()
	default:
		c.reply.Inc()
	}
}

// NewDHCPv6 resolves the interface, fills the server address and DUID from it, and
// checks the configuration; Run binds.
func NewDHCPv6(cfg DHCPv6Config, logger *zap.Logger, metrics *Metrics) (*DHCPv6, error) {
	if cfg.Interface == "" {
		return nil, errors.New("no interface configured for DHCPv6")
	}

	iface, err := net.InterfaceByName(cfg.Interface)
	if err != nil {
		return nil, fmt.Errorf("error resolving interface %q: %w", cfg.Interface, err)
	}

	if !cfg.ServerAddr.IsValid() {
		cfg.ServerAddr, err = firstGlobal6(iface)
		if err != nil {
			return nil, err
		}
	}

	if cfg.ServerDUID == nil {
		if len(iface.HardwareAddr) == 0 {
			return nil, fmt.Errorf("interface %s has no MAC address to make a DHCPv6 server DUID of", iface.Name)
		}

		cfg.ServerDUID = &dhcpv6.DUIDLL{HWType: iana.HWTypeEthernet, LinkLayerAddr: iface.HardwareAddr}
	}

	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("error in DHCPv6 configuration: %w", err)
	}

	if cfg.Pool != nil && !cfg.ServerAddr.IsValid() {
		return nil, fmt.Errorf("interface %s has no global IPv6 address and no server address is configured", iface.Name)
	}

	if logger == nil {
		logger = zap.NewNop()
	}

	logger = logger.With(zap.String("component", "dhcpv6"))

	if metrics == nil {
		metrics = NewMetrics(nil) // one set for both ports
	}

	return &DHCPv6{
		cfg:      cfg,
		iface:    iface,
		logger:   logger,
		unserved: newUnservedLog(logger),
		dhcp:     newDHCPv6Counters(metrics, "dhcpv6"),
		boot:     newDHCPv6Counters(metrics, "dhcpv6_bootserver"),
	}, nil
}

// firstGlobal6 returns the interface's first global unicast IPv6 address (ULAs
// included), or the zero Addr when it has none.
func firstGlobal6(iface *net.Interface) (netip.Addr, error) {
	addrs, err := interfaceAddrs(iface)
	if err != nil {
		return netip.Addr{}, err
	}

	if i := slices.IndexFunc(addrs, Global6); i >= 0 {
		return addrs[i], nil
	}

	return netip.Addr{}, nil
}

// Run binds the DHCPv6 port (joining ff02::1:2 on the interface) and the PXE boot server
// port, and serves until ctx is done, then closes the sockets. It binds before starting
// any goroutine, so a caller running Run on a thread inside a network namespace gets its
// sockets in that namespace.
func (s *DHCPv6) Run(ctx context.Context) error {
	conn, err := listenUDP6(ctx, s.iface, netip.IPv6Unspecified(), s.cfg.port(), true)
	if err != nil {
		return err
	}

	bootAddr := netip.IPv6Unspecified()
	if s.cfg.ServerAddr.IsValid() {
		bootAddr = s.cfg.ServerAddr
	}

	bootConn, err := listenUDP6(ctx, s.iface, bootAddr, s.cfg.pxePort(), false)
	if err != nil {
		conn.Close()

		return err
	}

	fields := []zap.Field{
		zap.String("interface", s.iface.Name), zap.Stringer("server_addr", s.cfg.ServerAddr),
		zap.Int("port", s.cfg.port()), zap.Int("pxe_port", s.cfg.pxePort()), zap.Stringer("server_duid", s.cfg.ServerDUID),
	}
	if s.cfg.Pool != nil {
		fields = append(fields, zap.Stringer("prefix", s.cfg.Pool.Prefix))
	}

	s.logger.Info("serving DHCPv6", fields...)

	// No state is kept (addresses are hashed), so several workers may answer at once.
	return serveConns(ctx, s.logger, []servedConn{
		{conn: conn, workers: runtime.GOMAXPROCS(0), onSendError: s.dhcp.sendErrs.Inc,
			handle: func(pkt []byte, src netip.AddrPort) ([]byte, netip.AddrPort) { return s.handle(pkt, src, false) }},
		{conn: bootConn, workers: 1, onSendError: s.boot.sendErrs.Inc,
			handle: func(pkt []byte, src netip.AddrPort) ([]byte, netip.AddrPort) { return s.handle(pkt, src, true) }},
	})
}

// handle returns the reply bytes and destination, or nil. On the boot server port
// (bootPort), the reply goes back to the port it came from and relays are not taken.
func (s *DHCPv6) handle(pkt []byte, src netip.AddrPort, bootPort bool) ([]byte, netip.AddrPort) {
	c := s.dhcp
	if bootPort {
		c = s.boot
	}

	c.received.Inc()

	if s.cfg.Serving != nil && s.cfg.Serving() != nil {
		c.ignored("unready")

		return nil, netip.AddrPort{}
	}

	msg, err := dhcpv6.FromBytes(pkt)
	if err != nil {
		c.malformed.Inc()

		if ce := s.logger.Check(zap.DebugLevel, "malformed DHCPv6 packet"); ce != nil {
			ce.Write(zap.Stringer("from", src), zap.Error(err))
		}

		return nil, netip.AddrPort{}
	}

	var (
		out     dhcpv6.DHCPv6
		req     *dhcpv6.Message
		reply   *dhcpv6.Message
		dstPort uint16
	)

	switch m := msg.(type) {
	case *dhcpv6.Message:
		req, dstPort = m, dhcpv6ClientPort
		reply, err = answer6(&s.cfg, m)
		out = reply
	case *dhcpv6.RelayMessage:
		if bootPort {
			err = errMessageType

			break
		}

		var relayRepl *dhcpv6.RelayMessage

		dstPort = dhcpv6ServerPort
		relayRepl, req, err = answerRelay6(&s.cfg, m)
		out = relayRepl

		if err == nil {
			reply, _ = relayRepl.GetInnerMessage() // cannot fail: it holds the reply just built
		}
	default:
		err = fmt.Errorf("%w: %T", ErrMalformed, msg)
	}

	if err != nil {
		s.notAnswered(c, req, src, err)

		return nil, netip.AddrPort{}
	}

	c.answered(reply.MessageType, msg.IsRelay())

	if s.cfg.Pool != nil && reply.GetOneOption(dhcpv6.OptionBootfileURL) == nil {
		// Full mode answers every client: one that asked to boot and cannot be is told
		// of here.
		if _, bootErr := bootFor6(&s.cfg, req); bootErr != nil {
			s.noteUnserved(req, bootErr)
		}
	}

	if ce := s.logger.Check(zap.DebugLevel, "answering DHCPv6 client"); ce != nil {
		ce.Write(zap.Stringer("from", src), zap.Stringer("type", reply.MessageType),
			zap.String("boot_url", reply.Options.BootFileURL()))
	}

	if bootPort {
		dstPort = src.Port()
	}

	return out.ToBytes(), netip.AddrPortFrom(s.replyAddr(src.Addr()), dstPort)
}

// replyAddr is where a reply to src goes: src, with a link-local address scoped by the
// interface's index rather than the name Go found for it. Go names zones from one
// process-wide table, which is wrong for a server in another network namespace than the
// one the table was read in.
func (s *DHCPv6) replyAddr(src netip.Addr) netip.Addr {
	if src.IsLinkLocalUnicast() && s.iface.Index > 0 {
		return src.WithZone(strconv.Itoa(s.iface.Index))
	}

	return src
}

// notAnswered counts and logs a message left unanswered (req is nil when it is not a
// client message); a boot client that cannot be served is logged once per machine.
func (s *DHCPv6) notAnswered(c *dhcpv6Counters, req *dhcpv6.Message, src netip.AddrPort, err error) {
	if errors.Is(err, ErrMalformed) {
		c.malformed.Inc()
	} else {
		c.ignored(ignoreReason(err))

		if req != nil {
			s.noteUnserved(req, err)
		}
	}

	if ce := s.logger.Check(zap.DebugLevel, "DHCPv6 packet not answered"); ce != nil {
		ce.Write(zap.Stringer("from", src), zap.Error(err))
	}
}

func (s *DHCPv6) noteUnserved(req *dhcpv6.Message, err error) {
	if unservedReason(err) == "" {
		return
	}

	vc := vendorClass6(req)

	var arch []byte
	if opt := req.GetOneOption(dhcpv6.OptionClientArchType); opt != nil {
		arch = opt.ToBytes()
	}

	ca, _ := requestArch(arch, vc) // only for the log line: the error is err
	s.unserved.note(clientHWAddr6(req), ca, vc, err)
}

// clientHWAddr6 is what names a DHCPv6 client in the unserved log: the link-layer
// address of its DUID when it has one (DUID-LL, DUID-LLT), else the DUID's bytes.
func clientHWAddr6(req *dhcpv6.Message) net.HardwareAddr {
	opt := req.GetOneOption(dhcpv6.OptionClientID)
	if opt == nil {
		return nil
	}

	raw := opt.ToBytes()

	duid, err := dhcpv6.DUIDFromBytes(raw)
	if err == nil {
		switch d := duid.(type) {
		case *dhcpv6.DUIDLL:
			if len(d.LinkLayerAddr) > 0 {
				return d.LinkLayerAddr
			}
		case *dhcpv6.DUIDLLT:
			if len(d.LinkLayerAddr) > 0 {
				return d.LinkLayerAddr
			}
		}
	}

	return net.HardwareAddr(raw)
}

// listenUDP6 binds addr:port on one interface and, with join, joins ff02::1:2 there.
// SO_BINDTODEVICE keeps us to the interface; SO_REUSEADDR lets another DHCPv6 server
// share the port in the same network namespace.
func listenUDP6(ctx context.Context, iface *net.Interface, addr netip.Addr, port int, join bool) (*net.UDPConn, error) {
	lc := net.ListenConfig{
		Control: func(_, _ string, rc syscall.RawConn) error {
			var serr error

			err := rc.Control(func(fd uintptr) {
				if serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); serr != nil {
					serr = fmt.Errorf("error setting SO_REUSEADDR: %w", serr)

					return
				}

				if serr = syscall.SetsockoptString(int(fd), syscall.SOL_SOCKET, syscall.SO_BINDTODEVICE, iface.Name); serr != nil {
					serr = fmt.Errorf("error binding to device %s: %w", iface.Name, serr)

					return
				}

				if addr.IsUnspecified() {
					// A multicast group is joined only by the [::] socket.
				} else if serr = syscall.SetsockoptInt(int(fd), syscall.SOL_IP, syscall.IP_FREEBIND, 1); serr != nil {
					// The address may still be tentative (duplicate address detection)
					// when the provider starts.
					serr = fmt.Errorf("error setting IP_FREEBIND: %w", serr)

					return
				}

				if !join {
					return
				}

				mreq := &syscall.IPv6Mreq{
					Multiaddr: allDHCPRelayAgentsAndServers.As16(),
					Interface: uint32(iface.Index), //nolint:gosec // interface indexes are positive
				}
				if serr = syscall.SetsockoptIPv6Mreq(int(fd), syscall.IPPROTO_IPV6, syscall.IPV6_JOIN_GROUP, mreq); serr != nil {
					serr = fmt.Errorf("error joining %s on %s: %w", allDHCPRelayAgentsAndServers, iface.Name, serr)
				}
			})
			if err != nil {
				return err
			}

			return serr
		},
	}

	pc, err := lc.ListenPacket(ctx, "udp6", net.JoinHostPort(addr.String(), strconv.Itoa(port)))
	if err != nil {
		return nil, fmt.Errorf("error binding %s UDP port [%s]:%d: %w", iface.Name, addr, port, err)
	}

	conn := pc.(*net.UDPConn) //nolint:forcetypeassert // what ListenPacket returns for "udp6"

	if _, err = setReadBuffer(conn, readBuffer); err != nil {
		conn.Close()

		return nil, fmt.Errorf("error sizing the receive buffer of UDP port %d (IPv6): %w", port, err)
	}

	return conn, nil
}
