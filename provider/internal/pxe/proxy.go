package pxe

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"sync"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"go.uber.org/zap"
)

// maxPacket is the receive buffer size: DHCP packets over Ethernet fit in 1500 bytes;
// anything longer is truncated and then fails to parse (counted as malformed).
const maxPacket = 2048

// ProxyDHCP answers PXE clients on the DHCP port (67) and the PXE boot server port (4011)
// with boot options only, beside the site's DHCP server.
type ProxyDHCP struct {
	cfg    Config
	ifname string
	logger *zap.Logger
	// unserved tells the operator of clients that asked and cannot be booted.
	unserved *unservedLog

	dhcp *dhcpCounters
	boot *dhcpCounters
}

// NewProxyDHCP checks the configuration and resolves the interface; Run binds.
func NewProxyDHCP(cfg Config, logger *zap.Logger, metrics *Metrics) (*ProxyDHCP, error) {
	ifname, err := prepareConfig(&cfg)
	if err != nil {
		return nil, err
	}

	if logger == nil {
		logger = zap.NewNop()
	}

	logger = logger.With(zap.String("component", "proxydhcp"))

	return &ProxyDHCP{
		cfg:      cfg,
		ifname:   ifname,
		logger:   logger,
		unserved: newUnservedLog(logger),
		dhcp:     metrics.dhcp("proxy"),
		boot:     metrics.dhcp("bootserver"),
	}, nil
}

// prepareConfig resolves the interface, fills ServerIP from it and validates.
func prepareConfig(cfg *Config) (string, error) {
	iface, ip, err := ResolveInterface(cfg.Interface, netip.Addr.Is4)
	if err != nil {
		return "", fmt.Errorf("error resolving interface %q: %w", cfg.Interface, err)
	}

	if !cfg.ServerIP.IsValid() {
		if !ip.IsValid() {
			return "", fmt.Errorf("interface %s has no IPv4 address and no server IP is configured", iface.Name)
		}

		cfg.ServerIP = ip
	}

	if err := cfg.Validate(); err != nil {
		return "", fmt.Errorf("error in DHCP configuration: %w", err)
	}

	return iface.Name, nil
}

// Run binds both ports and serves until ctx is done, then closes the sockets. The
// sockets are bound before Run starts any goroutine, so a caller that runs Run on a
// thread inside a network namespace gets sockets in that namespace.
func (p *ProxyDHCP) Run(ctx context.Context) error {
	dhcpConn, err := listenUDP(ctx, p.ifname, p.cfg.dhcpPort())
	if err != nil {
		return err
	}

	bootConn, err := listenUDP(ctx, p.ifname, p.cfg.pxePort())
	if err != nil {
		dhcpConn.Close()

		return err
	}

	p.logger.Info("serving ProxyDHCP",
		zap.String("interface", p.ifname), zap.Stringer("server_ip", p.cfg.ServerIP),
		zap.Int("dhcp_port", p.cfg.dhcpPort()), zap.Int("pxe_port", p.cfg.pxePort()))

	return serveConns(ctx, p.logger, []servedConn{
		{conn: dhcpConn, workers: runtime.GOMAXPROCS(0), onSendError: p.dhcp.sendErrs.Inc,
			handleInto: func(buf, out []byte, src netip.AddrPort) ([]byte, netip.AddrPort) {
				return p.handleInto(buf, out, src, false)
			}},
		{conn: bootConn, workers: 1, onSendError: p.boot.sendErrs.Inc,
			handleInto: func(buf, out []byte, src netip.AddrPort) ([]byte, netip.AddrPort) {
				return p.handleInto(buf, out, src, true)
			}},
	})
}

// handle returns the reply bytes and destination, or nil.
func (p *ProxyDHCP) handle(pkt []byte, src netip.AddrPort, bootPort bool) ([]byte, netip.AddrPort) {
	return p.handleInto(pkt, nil, src, bootPort)
}

// handleInto is handle with the reply written over out (when it has room).
func (p *ProxyDHCP) handleInto(pkt, out []byte, src netip.AddrPort, bootPort bool) ([]byte, netip.AddrPort) {
	if p.cfg.Serving != nil && p.cfg.Serving() != nil {
		p.unready(bootPort)

		return nil, netip.AddrPort{}
	}

	var req rawRequest
	if !req.parse(pkt) {
		return p.handleDecoded(pkt, src, bootPort)
	}

	c := p.dhcp
	if bootPort {
		c = p.boot
	}

	c.received.Inc()

	reply, mt, err := answerRaw(&p.cfg, &req, bootPort, out)
	if err != nil {
		p.notAnswered(c, src, req.hwAddr(), req.opts[slotArch], req.opts[slotVendorClass], err)

		return nil, netip.AddrPort{}
	}

	c.answered(mt)

	if mt == dhcpv4.MessageTypeOffer && p.cfg.Trace != nil {
		var firmware string
		if ca, err := requestArch(req.opts[slotArch], req.opts[slotVendorClass]); err == nil {
			firmware = ca.Firmware
		}

		p.cfg.Trace.MarkDHCP(macString(req.hwAddr()), machineIDFromOption(req.opts[slotGUID]), firmware, c.server)
	}

	if ce := p.logger.Check(zap.DebugLevel, "answering PXE client"); ce != nil {
		ce.Write(zap.Stringer("mac", net.HardwareAddr(req.hwAddr())), zap.Stringer("type", mt), zap.String("boot_file", bootFileOf(reply)))
	}

	return reply, replyToRaw(&p.cfg, &req, src, bootPort)
}

// unready counts a request left unanswered because this provider must not serve.
func (p *ProxyDHCP) unready(bootPort bool) {
	c := p.dhcp
	if bootPort {
		c = p.boot
	}

	c.received.Inc()
	c.ignored("unready")
}

// bootFileOf is the boot file option of a reply, for a debug log.
func bootFileOf(reply []byte) string {
	resp, err := dhcpv4.FromBytes(reply)
	if err != nil {
		return ""
	}

	return resp.BootFileNameOption()
}

// handleDecoded answers a request decoded by dhcpv4, which takes what rawRequest does
// not (repeated options) and refuses what is not DHCP.
func (p *ProxyDHCP) handleDecoded(pkt []byte, src netip.AddrPort, bootPort bool) ([]byte, netip.AddrPort) {
	c := p.dhcp
	if bootPort {
		c = p.boot
	}

	c.received.Inc()

	req, err := dhcpv4.FromBytes(pkt)
	if err != nil {
		c.malformed.Inc()

		if ce := p.logger.Check(zap.DebugLevel, "malformed DHCP packet"); ce != nil {
			ce.Write(zap.Stringer("from", src), zap.Error(err))
		}

		return nil, netip.AddrPort{}
	}

	resp, err := answer(&p.cfg, req, bootPort)
	if err != nil {
		p.notAnswered(c, src, req.ClientHWAddr, req.Options.Get(dhcpv4.OptionClientSystemArchitectureType),
			req.Options.Get(dhcpv4.OptionClassIdentifier), err)

		return nil, netip.AddrPort{}
	}

	c.answered(resp.MessageType())

	if resp.MessageType() == dhcpv4.MessageTypeOffer {
		traceOffer(p.cfg.Trace, c.server, req)
	}

	if ce := p.logger.Check(zap.DebugLevel, "answering PXE client"); ce != nil {
		ce.Write(zap.Stringer("mac", req.ClientHWAddr), zap.Stringer("type", resp.MessageType()),
			zap.String("boot_file", resp.BootFileNameOption()))
	}

	return resp.ToBytes(), ReplyTo(&p.cfg, req, src, bootPort)
}

// servedConn is one socket and what answers its packets.
type servedConn struct {
	conn    *net.UDPConn
	workers int
	handle  func(pkt []byte, src netip.AddrPort) ([]byte, netip.AddrPort)
	// handleInto, when set instead of handle, may write its reply over out, a buffer of
	// the reading loop's own, valid until the next packet.
	handleInto func(pkt, out []byte, src netip.AddrPort) ([]byte, netip.AddrPort)
	// onSendError counts replies that could not be sent; may be nil.
	onSendError func()
}

// serveConns runs the read loops of the sockets until ctx is done, then closes the
// sockets and waits for the loops. Several workers may read one UDP socket: each datagram
// goes to exactly one of them.
func serveConns(ctx context.Context, logger *zap.Logger, conns []servedConn) error {
	var (
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	for _, sc := range conns {
		for range max(sc.workers, 1) {
			wg.Go(func() {
				if err := readLoop(ctx, logger, sc); err != nil {
					errOnce.Do(func() { firstErr = err })
					cancel()
				}
			})
		}
	}

	<-ctx.Done()

	for _, sc := range conns {
		sc.conn.Close() // unblocks the readers
	}

	wg.Wait()

	return firstErr
}

func readLoop(ctx context.Context, logger *zap.Logger, sc servedConn) error {
	buf := make([]byte, maxPacket)
	replyBuf := make([]byte, 0, maxPacket)

	for {
		n, src, err := sc.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if ctx.Err() != nil {
				return nil //nolint:nilerr // stopping closed the socket: not a failure
			}

			return fmt.Errorf("error reading from %s: %w", sc.conn.LocalAddr(), err)
		}

		var (
			out []byte
			dst netip.AddrPort
		)

		if sc.handleInto != nil {
			out, dst = sc.handleInto(buf[:n], replyBuf, src)
		} else {
			out, dst = sc.handle(buf[:n], src)
		}

		if out == nil {
			continue
		}

		if _, err := sc.conn.WriteToUDPAddrPort(out, dst); err != nil {
			if sc.onSendError != nil {
				sc.onSendError()
			}

			// Not fatal: a client that went away must not stop the server.
			if ce := logger.Check(zap.DebugLevel, "error sending DHCP reply"); ce != nil {
				ce.Write(zap.Stringer("to", dst), zap.Error(err))
			}
		}
	}
}

// notAnswered counts and logs a request either path (raw or decoded) declined to answer,
// from its option 93 and vendor class (nil when absent). A boot client that cannot be
// served is logged once per machine at warning level; the rest at debug level only.
func (p *ProxyDHCP) notAnswered(c *dhcpCounters, src netip.AddrPort, mac net.HardwareAddr, arch, vendorClass []byte, err error) {
	if errors.Is(err, ErrMalformed) {
		c.malformed.Inc()
	} else {
		c.ignored(ignoreReason(err))

		if unservedReason(err) != "" {
			ca, _ := requestArch(arch, vendorClass) // only for the log line: the error is err
			p.unserved.note(mac, ca, vendorClass, err)
		}
	}

	if ce := p.logger.Check(zap.DebugLevel, "DHCP packet not answered"); ce != nil {
		ce.Write(zap.Stringer("from", src), zap.Stringer("mac", mac), zap.Error(err))
	}
}
