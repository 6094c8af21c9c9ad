package link

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/nclient4"
	"github.com/jsimonetti/rtnetlink/v2"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// run owns one link: up, lease, apply, renew; on losing the lease, start
// over. It returns when ctx ends.
func (m *Manager) run(ctx context.Context, ifc *net.Interface) {
	log := m.log.With(zap.String("link", ifc.Name))

	// SLAAC needs accept_ra; the default (1) already allows it unless
	// forwarding is on. Best effort: the file is absent without IPv6.
	_ = os.WriteFile(filepath.Join("/proc/sys/net/ipv6/conf", ifc.Name, "accept_ra"), []byte("1"), 0o644)

	backoff := m.opts.Backoff

	for ctx.Err() == nil {
		err := m.conn.LinkUp(ifc)
		if err == nil {
			err = m.leaseLoop(ctx, log, ifc)
		} else {
			err = fmt.Errorf("setting link up: %w", err)
		}

		if ctx.Err() != nil {
			return
		}

		m.update(ifc.Name, func(ls *linkState) { ls.err = err })
		log.Warn("no DHCPv4 lease; retrying", zap.Error(err), zap.Duration("in", backoff))

		if !sleep(ctx, backoff) {
			return
		}

		backoff = min(backoff*2, m.opts.MaxBackoff)
	}
}

// leaseLoop gets a lease, applies it and renews it until renewals fail
// past its expiry or ctx ends.
func (m *Manager) leaseLoop(ctx context.Context, log *zap.Logger, ifc *net.Interface) error {
	lease, err := m.exchange(ctx, ifc, nil)
	if err != nil {
		return err
	}

	var applied *config

	defer func() {
		if applied != nil && ctx.Err() == nil {
			// The lease is gone: stop using its address.
			m.unapply(ifc, applied)
			m.update(ifc.Name, func(ls *linkState) { ls.lease = nil })
		}
	}()

	for {
		c, ok := plan(lease.ACK)
		if !ok {
			return errNoAddress
		}

		if err := m.apply(ifc, applied, &c); err != nil {
			return err
		}

		applied = &c
		server, _ := netip.AddrFromSlice(lease.ACK.ServerIdentifier().To4())

		// DNS and the hostname first, then wake WaitAddress: a caller woken by the lease
		// finds the link fully configured.
		m.mu.Lock()
		m.links[ifc.Name].lease, m.links[ifc.Name].server, m.links[ifc.Name].got, m.links[ifc.Name].err = &c, server, lease.CreationTime, nil
		m.mu.Unlock()

		m.writeDNS()
		m.setHostname(c.Hostname)
		m.update(ifc.Name, func(*linkState) {})

		log.Info("DHCPv4 lease",
			zap.Stringer("address", c.Address),
			zap.Any("routes", routeStrings(c.Routes)),
			zap.Any("dns", c.DNS),
			zap.Stringer("server", server),
			zap.Duration("lease", c.Expire))

		// Renew at T1, then retry every tenth of the lease until it
		// expires; then the caller starts over with a discover.
		expire := lease.CreationTime.Add(c.Expire)
		next := lease.CreationTime.Add(c.Renew)

		for {
			if !sleep(ctx, time.Until(next)) {
				return ctx.Err()
			}

			renewed, err := m.exchange(ctx, ifc, lease)
			if err == nil {
				lease = renewed

				break
			}

			var nak *nclient4.ErrNak
			if errors.As(err, &nak) || time.Now().After(expire) {
				return fmt.Errorf("lease lost: %w", err)
			}

			log.Warn("DHCPv4 renewal failed", zap.Error(err))
			next = time.Now().Add(max(c.Expire/10, time.Second))
		}
	}
}

// exchange runs one DORA (old == nil) or one renewal, bounded by
// Options.Attempt.
func (m *Manager) exchange(ctx context.Context, ifc *net.Interface, old *nclient4.Lease) (*nclient4.Lease, error) {
	ctx, cancel := context.WithTimeout(ctx, m.opts.Attempt)
	defer cancel()

	// A client per exchange: nothing stays bound to the link between
	// renewals hours apart.
	client, err := nclient4.New(ifc.Name, nclient4.WithTimeout(m.opts.Attempt/3), nclient4.WithRetry(3))
	if err != nil {
		return nil, fmt.Errorf("DHCPv4 client on %s: %w", ifc.Name, err)
	}
	defer client.Close()

	want := dhcpv4.WithRequestedOptions(
		dhcpv4.OptionSubnetMask, dhcpv4.OptionRouter, dhcpv4.OptionDomainNameServer,
		dhcpv4.OptionHostName, dhcpv4.OptionDomainName, dhcpv4.OptionDNSDomainSearchList,
		dhcpv4.OptionClasslessStaticRoute, dhcpv4.OptionIPAddressLeaseTime,
		dhcpv4.OptionRenewTimeValue, dhcpv4.OptionRebindingTimeValue,
	)

	if old != nil {
		l, err := client.Renew(ctx, old, want)
		if err != nil {
			return nil, fmt.Errorf("DHCPv4 renew: %w", err)
		}

		return l, nil
	}

	l, err := client.Request(ctx, want)
	if err != nil {
		return nil, fmt.Errorf("DHCPv4: %w", err)
	}

	return l, nil
}

// apply configures c on the link, removing what old set that c does not.
func (m *Manager) apply(ifc *net.Interface, old, c *config) error {
	if old != nil && old.Address != c.Address {
		m.unapply(ifc, old)
	}

	err := m.conn.AddrAdd(ifc, ipNet(c.Address))
	if err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("adding %s to %s: %w", c.Address, ifc.Name, err)
	}

	for _, r := range c.Routes {
		if err := m.conn.Conn.Route.Replace(routeMessage(ifc, r)); err != nil {
			return fmt.Errorf("adding route %s via %s on %s: %w", r.Dst, r.Gw, ifc.Name, err)
		}
	}

	return nil
}

func (m *Manager) unapply(ifc *net.Interface, c *config) {
	for _, r := range c.Routes {
		_ = m.conn.Conn.Route.Delete(routeMessage(ifc, r))
	}

	if err := m.conn.AddrDel(ifc, ipNet(c.Address)); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
		m.log.Warn("removing address", zap.String("link", ifc.Name), zap.Stringer("address", c.Address), zap.Error(err))
	}
}

// routeMessage builds a main-table IPv4 route. Its metric is derived from
// the link so each link's default route coexists with the others' instead
// of replacing them.
func routeMessage(ifc *net.Interface, r route) *rtnetlink.RouteMessage {
	scope := uint8(unix.RT_SCOPE_UNIVERSE)
	attrs := rtnetlink.RouteAttributes{
		Dst:      r.Dst.Addr().AsSlice(),
		OutIface: uint32(ifc.Index),        //nolint:gosec // an ifindex: a positive int32
		Priority: 1024 + uint32(ifc.Index), //nolint:gosec // an ifindex: a positive int32
	}

	if r.Gw.IsValid() {
		attrs.Gateway = r.Gw.AsSlice()
	} else {
		scope = unix.RT_SCOPE_LINK
	}

	return &rtnetlink.RouteMessage{
		Family:     unix.AF_INET,
		DstLength:  uint8(r.Dst.Bits()), //nolint:gosec // at most 32
		Table:      unix.RT_TABLE_MAIN,
		Protocol:   unix.RTPROT_DHCP,
		Scope:      scope,
		Type:       unix.RTN_UNICAST,
		Attributes: attrs,
	}
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

func routeStrings(rs []route) []string {
	out := make([]string, 0, len(rs))
	for _, r := range rs {
		if r.Gw.IsValid() {
			out = append(out, r.Dst.String()+" via "+r.Gw.String())
		} else {
			out = append(out, r.Dst.String()+" on-link")
		}
	}

	return out
}

// sleep waits d or until ctx ends, reporting whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}

	t := time.NewTimer(d)
	defer t.Stop()

	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
