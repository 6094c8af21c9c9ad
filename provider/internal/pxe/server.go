package pxe

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"go.uber.org/zap"
)

// How long an offered address is held for the client, and a declined one kept out of use.
const (
	offerHold    = 30 * time.Second
	declineDelay = 10 * time.Minute
)

// Bounds of what the server holds for clients it has not leased to: every DHCP packet is
// unauthenticated, and a host on the segment can send them from any number of made-up
// MAC addresses.
const (
	// maxOffers bounds the offers held at once (each holds an address for offerHold): a
	// rack powering on is tens of clients, a /20 of them at once is thousands. Past it
	// a DISCOVER from a client without an offer is not answered until offers expire.
	maxOffers = 4096
	// maxDeclined bounds the addresses held out of use after a DECLINE, whatever the
	// pool's size; declinedShare keeps them to a quarter of the pool, so that
	// DECLINEs, real or not, never leave the pool without addresses. A network with
	// more addresses in use than that has a pool that overlaps static addresses.
	maxDeclined   = 1024
	declinedShare = 4
	// maxDeclinesPerClient bounds the addresses one client may have held out: a client
	// that finds an address in use declines it and asks again, and meeting a third
	// taken address in a row says the pool overlaps others' addresses, not bad luck.
	maxDeclinesPerClient = 2
	// sweepEvery is how often expired offers and declines are removed: the maps hold
	// what is current, not every client ever seen.
	sweepEvery = time.Second
)

// DHCPServer is the full DHCP server, for networks without one: it hands out addresses
// from Config.Pool to every client, and boot options (as the proxy does) to PXE clients.
// It answers on the DHCP port only: with the boot file in the offer, PXE clients need no
// boot server.
type DHCPServer struct {
	cfg    Config
	ifname string
	logger *zap.Logger
	leases LeaseStore
	c      *dhcpCounters
	// unserved tells the operator of boot clients given an address but no boot file.
	unserved *unservedLog
	now      func() time.Time

	// One goroutine serves packets, but the maps are also read by tests.
	mu     sync.Mutex
	byMAC  map[string]Lease
	byAddr map[netip.Addr]string
	// offers are by client MAC; offeredTo says which client an address is offered to.
	offers    map[string]offer
	offeredTo map[netip.Addr]string
	declined  map[netip.Addr]decline
	// nextSweep is when expired offers and declines are next removed.
	nextSweep time.Time
	// maxOffers and maxDeclined are the maps' bounds (the constants; tests lower them).
	maxOffers   int
	maxDeclined int
}

type offer struct {
	addr  netip.Addr
	until time.Time
}

// decline is an address held out of use, and the client that declined it.
type decline struct {
	mac   string
	until time.Time
}

// NewDHCPServer checks the configuration (cfg.Pool is required) and resolves the
// interface; Run loads the leases and binds.
func NewDHCPServer(cfg Config, leases LeaseStore, logger *zap.Logger, metrics *Metrics) (*DHCPServer, error) {
	if cfg.Pool == nil {
		return nil, errors.New("full DHCP mode needs an address pool")
	}

	if leases == nil {
		return nil, errors.New("full DHCP mode needs a lease store")
	}

	ifname, err := prepareConfig(&cfg)
	if err != nil {
		return nil, err
	}

	if logger == nil {
		logger = zap.NewNop()
	}

	logger = logger.With(zap.String("component", "dhcp"))

	s := newDHCPServer(cfg, leases, logger, metrics.dhcp("dhcp"))
	s.ifname = ifname

	return s, nil
}

// newDHCPServer returns the server of a checked configuration, without sockets.
func newDHCPServer(cfg Config, leases LeaseStore, logger *zap.Logger, c *dhcpCounters) *DHCPServer {
	return &DHCPServer{
		cfg:         cfg,
		logger:      logger,
		unserved:    newUnservedLog(logger),
		leases:      leases,
		c:           c,
		now:         time.Now,
		byMAC:       map[string]Lease{},
		byAddr:      map[netip.Addr]string{},
		offers:      map[string]offer{},
		offeredTo:   map[netip.Addr]string{},
		declined:    map[netip.Addr]decline{},
		maxOffers:   maxOffers,
		maxDeclined: min(maxDeclined, max(cfg.Pool.size()/declinedShare, 1)),
	}
}

// Run loads the leases, binds the DHCP port and serves until ctx is done.
func (s *DHCPServer) Run(ctx context.Context) error {
	leases, err := s.leases.List(ctx)
	if err != nil {
		return fmt.Errorf("error loading DHCP leases: %w", err)
	}

	s.mu.Lock()
	for _, l := range leases {
		s.byMAC[l.MAC] = l
		s.byAddr[l.Address] = l.MAC
	}
	s.mu.Unlock()

	conn, err := listenUDP(ctx, s.ifname, s.cfg.dhcpPort())
	if err != nil {
		return err
	}

	p := s.cfg.Pool
	s.logger.Info("serving DHCP", zap.String("interface", s.ifname), zap.Stringer("server_ip", s.cfg.ServerIP),
		zap.Stringer("pool_start", p.Start), zap.Stringer("pool_end", p.End), zap.Int("leases", len(leases)))

	// One worker: lease decisions are serialized, and Put is durable before the ACK.
	return serveConns(ctx, s.logger, []servedConn{{
		conn: conn, workers: 1, onSendError: s.c.sendErrs.Inc,
		handle: func(pkt []byte, src netip.AddrPort) ([]byte, netip.AddrPort) {
			return s.handle(ctx, pkt, src)
		},
	}})
}

func (s *DHCPServer) handle(ctx context.Context, pkt []byte, src netip.AddrPort) ([]byte, netip.AddrPort) {
	s.c.received.Inc()

	req, err := dhcpv4.FromBytes(pkt)
	if err == nil && (req.OpCode != dhcpv4.OpcodeBootRequest || len(req.ClientHWAddr) != 6) {
		err = fmt.Errorf("%w: not an Ethernet BOOTREQUEST", ErrMalformed)
	}

	if err != nil {
		s.c.malformed.Inc()
		s.logger.Debug("malformed DHCP packet", zap.Stringer("from", src), zap.Error(err))

		return nil, netip.AddrPort{}
	}

	resp, err := s.Handle(ctx, req)
	if err != nil {
		switch {
		case errors.Is(err, ErrMalformed):
			s.c.malformed.Inc()
		case errors.Is(err, ErrIgnore):
			s.c.ignored(ignoreReason(err))
			s.unserved.note(req.ClientHWAddr, ClientArch{}, nil, err)
		default:
			s.c.ignored("error")
			s.logger.Error("error handling DHCP request", zap.Stringer("mac", req.ClientHWAddr), zap.Error(err))

			return nil, netip.AddrPort{}
		}

		s.logger.Debug("DHCP packet not answered", zap.Stringer("mac", req.ClientHWAddr), zap.Error(err))

		return nil, netip.AddrPort{}
	}

	s.c.answered(resp.MessageType())

	// Only offers with boot options are a boot's start: everyone else (Talos itself
	// among them) just gets an address.
	if resp.MessageType() == dhcpv4.MessageTypeOffer && resp.Options.Has(dhcpv4.OptionBootfileName) {
		traceOffer(s.cfg.Trace, s.c.server, req)
	}

	s.logger.Debug("answering DHCP client", zap.Stringer("mac", req.ClientHWAddr),
		zap.Stringer("type", resp.MessageType()), zap.Stringer("address", resp.YourIPAddr))

	dst := ReplyTo(&s.cfg, req, src, false)
	if _, relayed := addr4(req.GatewayIPAddr); resp.MessageType() == dhcpv4.MessageTypeNak && !relayed {
		// RFC 2131 4.3.2: a NAK goes to the broadcast address when not relayed.
		dst = netip.AddrPortFrom(broadcast, dst.Port())
	}

	return resp.ToBytes(), dst
}

// Handle is the full DHCP decision for one parsed request, with lease bookkeeping: a
// reply, or an error matching ErrIgnore or ErrMalformed (no reply), or another error
// (the lease store failed; no reply).
func (s *DHCPServer) Handle(ctx context.Context, req *dhcpv4.DHCPv4) (*dhcpv4.DHCPv4, error) {
	s.mu.Lock()
	defer s.mu.Unlock()

	mac := req.ClientHWAddr.String()
	now := s.now()

	s.sweep(now)

	switch req.MessageType() {
	case dhcpv4.MessageTypeDiscover:
		if _, held := s.offers[mac]; !held && len(s.offers) >= s.maxOffers {
			return nil, errOffersFull
		}

		addr, ok := s.pick(mac, req, now)
		if !ok {
			return nil, errNoAddress
		}

		s.holdOffer(mac, addr, now.Add(offerHold))

		return s.reply(req, dhcpv4.MessageTypeOffer, addr), nil

	case dhcpv4.MessageTypeRequest:
		return s.request(ctx, mac, req, now)

	case dhcpv4.MessageTypeRelease:
		if l, ok := s.byMAC[mac]; ok && ipEqual(req.ClientIPAddr, l.Address) {
			if err := s.forget(ctx, l); err != nil {
				return nil, err
			}
		}

		return nil, errMessageType // no reply to a RELEASE

	case dhcpv4.MessageTypeDecline:
		return nil, s.decline(ctx, mac, req, now)

	default:
		return nil, errMessageType
	}
}

// decline takes a client's word that the address it was offered or leased is in use
// (it saw it answer ARP): the address is held out of use for declineDelay. A DECLINE of
// an address that is not the client's is ignored, as are those past the client's and
// the pool's share of declines: anyone can send a DECLINE for any address, from any
// MAC address, and must not empty the pool so. There is no reply to a DECLINE.
func (s *DHCPServer) decline(ctx context.Context, mac string, req *dhcpv4.DHCPv4, now time.Time) error {
	addr, ok := addr4(req.RequestedIPAddress())
	if !ok {
		return fmt.Errorf("%w: DECLINE without address", ErrMalformed)
	}

	o, offered := s.offers[mac]
	l, leased := s.byMAC[mac]

	offered = offered && o.addr == addr
	leased = leased && l.Address == addr

	if !offered && !leased {
		return errDeclineNotOurs
	}

	// The client will not use the address either way: its offer and lease go.
	s.dropOffer(mac)

	if leased {
		if err := s.forget(ctx, l); err != nil {
			return err
		}
	}

	if _, held := s.declined[addr]; !held && (len(s.declined) >= s.maxDeclined || s.declinedBy(mac) >= maxDeclinesPerClient) {
		return errDeclineLimit
	}

	s.declined[addr] = decline{mac: mac, until: now.Add(declineDelay)}

	return errMessageType
}

// declinedBy counts the addresses mac has held out of use.
func (s *DHCPServer) declinedBy(mac string) int {
	n := 0

	for _, d := range s.declined {
		if d.mac == mac {
			n++
		}
	}

	return n
}

// holdOffer holds addr for mac until the given time.
func (s *DHCPServer) holdOffer(mac string, addr netip.Addr, until time.Time) {
	s.dropOffer(mac)
	s.offers[mac] = offer{addr: addr, until: until}
	s.offeredTo[addr] = mac
}

// dropOffer forgets mac's offer, if any.
func (s *DHCPServer) dropOffer(mac string) {
	o, ok := s.offers[mac]
	if !ok {
		return
	}

	delete(s.offers, mac)

	if s.offeredTo[o.addr] == mac {
		delete(s.offeredTo, o.addr)
	}
}

// sweep removes expired offers and declines, at most every sweepEvery: the maps then
// hold what is current, whatever number of clients came and went.
func (s *DHCPServer) sweep(now time.Time) {
	if now.Before(s.nextSweep) {
		return
	}

	s.nextSweep = now.Add(sweepEvery)

	for mac, o := range s.offers {
		if !now.Before(o.until) {
			s.dropOffer(mac)
		}
	}

	for addr, d := range s.declined {
		if !now.Before(d.until) {
			delete(s.declined, addr)
		}
	}
}

func (s *DHCPServer) request(ctx context.Context, mac string, req *dhcpv4.DHCPv4, now time.Time) (*dhcpv4.DHCPv4, error) {
	if sid, ok := addr4(req.ServerIdentifier()); ok && sid != s.cfg.ServerIP {
		// The client took another server's offer.
		s.dropOffer(mac)

		return nil, errNotForUs
	}

	addr, ok := addr4(req.RequestedIPAddress())
	if !ok {
		addr, ok = addr4(req.ClientIPAddr)
	}

	if !ok {
		return nil, fmt.Errorf("%w: REQUEST without address", ErrMalformed)
	}

	if !s.inPool(addr) || !s.free(addr, mac, now) {
		return s.nak(req), nil
	}

	l := Lease{MAC: mac, Address: addr, Hostname: req.HostName(), Expires: now.Add(s.cfg.Pool.LeaseTime)}

	// An expired lease of another client on this address goes first.
	if owner, ok := s.byAddr[addr]; ok && owner != mac {
		if err := s.forget(ctx, s.byMAC[owner]); err != nil {
			return nil, err
		}
	}

	if err := s.leases.Put(ctx, l); err != nil {
		return nil, err
	}

	if old, ok := s.byMAC[mac]; ok && old.Address != addr {
		delete(s.byAddr, old.Address)
	}

	s.byMAC[mac] = l
	s.byAddr[addr] = mac
	s.dropOffer(mac)

	return s.reply(req, dhcpv4.MessageTypeAck, addr), nil
}

// forget deletes a lease from the store and the maps.
func (s *DHCPServer) forget(ctx context.Context, l Lease) error {
	if err := s.leases.Delete(ctx, l.MAC); err != nil {
		return err
	}

	delete(s.byMAC, l.MAC)

	if s.byAddr[l.Address] == l.MAC {
		delete(s.byAddr, l.Address)
	}

	return nil
}

// pick chooses the address to offer: the client's lease, its pending offer, the address
// it asks for, or the first free one. The scan is bounded by the pool size.
func (s *DHCPServer) pick(mac string, req *dhcpv4.DHCPv4, now time.Time) (netip.Addr, bool) {
	if l, ok := s.byMAC[mac]; ok && s.inPool(l.Address) && s.free(l.Address, mac, now) {
		return l.Address, true
	}

	if o, ok := s.offers[mac]; ok && now.Before(o.until) && s.free(o.addr, mac, now) {
		return o.addr, true
	}

	if a, ok := addr4(req.RequestedIPAddress()); ok && s.inPool(a) && s.free(a, mac, now) {
		return a, true
	}

	p := s.cfg.Pool
	for a := p.Start; a.IsValid() && !p.End.Less(a); a = a.Next() {
		if s.free(a, mac, now) {
			return a, true
		}
	}

	return netip.Addr{}, false
}

// size is how many addresses the pool holds.
func (p *Pool) size() int {
	if !p.Start.Is4() || !p.End.Is4() || p.End.Less(p.Start) {
		return 0
	}

	start, end := p.Start.As4(), p.End.As4()

	return int(binary.BigEndian.Uint32(end[:])-binary.BigEndian.Uint32(start[:])) + 1
}

func (s *DHCPServer) inPool(a netip.Addr) bool {
	p := s.cfg.Pool

	return a.Is4() && !a.Less(p.Start) && !p.End.Less(a)
}

// free reports whether addr may go to mac: not ours or the router's, not recently
// declined, not leased (unexpired) or offered to another client.
func (s *DHCPServer) free(addr netip.Addr, mac string, now time.Time) bool {
	if addr == s.cfg.ServerIP || addr == s.cfg.Pool.Router {
		return false
	}

	if d, ok := s.declined[addr]; ok {
		if now.Before(d.until) {
			return false
		}

		delete(s.declined, addr)
	}

	if owner, ok := s.byAddr[addr]; ok && owner != mac && now.Before(s.byMAC[owner].Expires) {
		return false
	}

	if m, ok := s.offeredTo[addr]; ok && m != mac && now.Before(s.offers[m].until) {
		return false
	}

	return true
}

func (s *DHCPServer) reply(req *dhcpv4.DHCPv4, mt dhcpv4.MessageType, addr netip.Addr) *dhcpv4.DHCPv4 {
	p := s.cfg.Pool
	resp := newReply(&s.cfg, req, mt)
	resp.YourIPAddr = net.IP(addr.AsSlice())

	resp.Options.Update(dhcpv4.OptSubnetMask(net.CIDRMask(p.Subnet.Bits(), 32)))
	resp.Options.Update(dhcpv4.OptIPAddressLeaseTime(p.LeaseTime))

	if p.Router.IsValid() {
		resp.Options.Update(dhcpv4.OptRouter(net.IP(p.Router.AsSlice())))
	}

	if len(p.DNS) > 0 {
		dns := make([]net.IP, len(p.DNS))
		for i, d := range p.DNS {
			dns[i] = net.IP(d.AsSlice())
		}

		resp.Options.Update(dhcpv4.OptDNS(dns...))
	}

	// Boot options only for PXE clients with a boot file we can vouch for; everyone else
	// just gets an address.
	b, err := BootFor(&s.cfg, req)
	if err == nil {
		addBootOptions(&s.cfg, req, resp, &b)
	} else if mt == dhcpv4.MessageTypeOffer {
		s.unserved.note(req.ClientHWAddr, b.Arch, req.Options.Get(dhcpv4.OptionClassIdentifier), err)
	}

	return resp
}

func (s *DHCPServer) nak(req *dhcpv4.DHCPv4) *dhcpv4.DHCPv4 {
	resp := newReply(&s.cfg, req, dhcpv4.MessageTypeNak)
	resp.ClientIPAddr = net.IPv4zero
	resp.SetBroadcast()

	return resp
}

func ipEqual(ip net.IP, a netip.Addr) bool {
	b, ok := addr4(ip)

	return ok && b == a
}
