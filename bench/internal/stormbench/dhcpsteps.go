package stormbench

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// discover sends DISCOVER until both the site server's and the proxy's offers are in.
func (d *dhcpConn) discover(ctx context.Context, replies chan *dhcpv4.DHCPv4, disc *dhcpv4.DHCPv4, first time.Duration, tries int,
	info *bootInfo, site, proxy **dhcpv4.DHCPv4,
) error {
	sent := false
	send := func() error {
		if sent {
			info.NoSite += btoi(*site == nil)
			info.NoProxy += btoi(*proxy == nil)
		}

		sent = true

		return d.send(disc, broadcastAddr)
	}

	err := d.retry(ctx, replies, first, tries, &info.Retrans, send,
		func(p *dhcpv4.DHCPv4) bool {
			if p.MessageType() != dhcpv4.MessageTypeOffer {
				return false
			}

			switch {
			case !p.YourIPAddr.IsUnspecified() && *site == nil:
				*site = p
			case p.YourIPAddr.IsUnspecified() && bytes.HasPrefix(p.Options.Get(dhcpv4.OptionClassIdentifier), pxeClass):
				*proxy = p
			}

			return *site != nil && *proxy != nil
		})
	if err != nil {
		return fmt.Errorf("DISCOVER (site offer %t, proxy offer %t): %w", *site != nil, *proxy != nil, err)
	}

	return nil
}

// request asks the site server for its offer's address; info.Lease stays nil on a NAK.
func (d *dhcpConn) request(ctx context.Context, m machine, xid dhcpv4.TransactionID, replies chan *dhcpv4.DHCPv4, site *dhcpv4.DHCPv4,
	mods []dhcpv4.Modifier, first time.Duration, tries int, info *bootInfo,
) error {
	req, err := dhcpv4.New(append([]dhcpv4.Modifier{
		dhcpv4.WithTransactionID(xid), dhcpv4.WithHwAddr(m.MAC), dhcpv4.WithBroadcast(true),
		dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
		dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(site.YourIPAddr)),
		dhcpv4.WithOption(dhcpv4.OptServerIdentifier(site.ServerIdentifier())),
	}, mods...)...)
	if err != nil {
		return fmt.Errorf("error building the REQUEST: %w", err)
	}

	err = d.retry(ctx, replies, first, tries, &info.Retrans, func() error { return d.send(req, broadcastAddr) },
		func(p *dhcpv4.DHCPv4) bool {
			if !p.ServerIdentifier().Equal(site.ServerIdentifier()) {
				return false
			}

			switch p.MessageType() {
			case dhcpv4.MessageTypeAck:
				if p.YourIPAddr.Equal(site.YourIPAddr) {
					info.Lease = p.YourIPAddr

					return true
				}
			case dhcpv4.MessageTypeNak:
				return true
			}

			return false
		})
	if err != nil {
		return fmt.Errorf("REQUEST of %s: %w", site.YourIPAddr, err)
	}

	return nil
}

func btoi(b bool) int {
	if b {
		return 1
	}

	return 0
}
