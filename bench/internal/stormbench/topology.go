package stormbench

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/anvil-metal/anvil/internal/netns"
	"github.com/anvil-metal/anvil/internal/proc"
)

// segment is the storm's provisioning network: three namespaces on one bridge, as a rack
// sees its network. The client namespace holds the bridge (and the machines, on its
// address); the server namespace the provider or the classic stack; the site namespace
// the site's DHCP server. Broadcasts reach both servers; their broadcast answers reach
// the machines.
type segment struct {
	client, server, site             string // namespaces
	bridge, serverIf, siteIf         string // the bridge (client ns) and the servers' veth ends
	clientAddr, serverAddr, siteAddr netip.Addr
	prefix                           netip.Prefix
	// leases is the site server's range; the client namespace holds it as local
	// addresses, so that answers sent to a machine's lease (ciaddr) reach the machines.
	leases netip.Prefix
}

// newSegment creates "<name>-c", "<name>-s", "<name>-d" on 10.<b>.0.0/16 (server .0.1,
// site .0.2, client .0.3). On error everything created is removed.
func newSegment(name string, b byte) (g *segment, err error) {
	g = &segment{
		client: name + "-c", server: name + "-s", site: name + "-d",
		bridge: "br0", serverIf: name + "s", siteIf: name + "d",
		prefix:     netip.PrefixFrom(netip.AddrFrom4([4]byte{10, b, 0, 0}), 16),
		leases:     netip.PrefixFrom(netip.AddrFrom4([4]byte{10, b, 128, 0}), 17),
		serverAddr: netip.AddrFrom4([4]byte{10, b, 0, 1}),
		siteAddr:   netip.AddrFrom4([4]byte{10, b, 0, 2}),
		clientAddr: netip.AddrFrom4([4]byte{10, b, 0, 3}),
	}

	defer func() {
		if err != nil {
			err = errors.Join(fmt.Errorf("error creating the storm's namespaces: %w", err), g.delete())
		}
	}()

	for _, ns := range []string{g.client, g.server, g.site} {
		if err := netns.Create(ns); err != nil {
			return nil, err
		}
	}

	c, err := netns.OpenLinks(g.client)
	if err != nil {
		return nil, err
	}

	defer c.Close()

	s, err := netns.OpenLinks(g.server)
	if err != nil {
		return nil, err
	}

	defer s.Close()

	d, err := netns.OpenLinks(g.site)
	if err != nil {
		return nil, err
	}

	defer d.Close()

	pfx := func(a netip.Addr) netip.Prefix { return netip.PrefixFrom(a, g.prefix.Bits()) }

	steps := []func() error{
		func() error { return c.AddBridge(g.bridge) },
		func() error { return c.AddVeth("to-s", g.serverIf, g.server) },
		func() error { return c.AddVeth("to-d", g.siteIf, g.site) },
		func() error { return c.SetMaster("to-s", g.bridge) },
		func() error { return c.SetMaster("to-d", g.bridge) },
		func() error { return c.AddAddr(g.bridge, pfx(g.clientAddr)) },
		func() error { return s.AddAddr(g.serverIf, pfx(g.serverAddr)) },
		func() error { return d.AddAddr(g.siteIf, pfx(g.siteAddr)) },
	}

	for _, l := range []struct {
		links *netns.Links
		names []string
	}{{c, []string{"lo", "to-s", "to-d", g.bridge}}, {s, []string{"lo", g.serverIf}}, {d, []string{"lo", g.siteIf}}} {
		for _, n := range l.names {
			steps = append(steps, func() error { return l.links.SetUp(n) })
		}
	}

	for _, step := range steps {
		if err := step(); err != nil {
			return nil, err
		}
	}

	if _, err := proc.Run(context.Background(), "ip", "-n", g.client, "route", "add", "local", g.leases.String(), "dev", "lo", "table", "local"); err != nil {
		return nil, fmt.Errorf("error routing the leases to the machines: %w", err)
	}

	return g, nil
}

// delete removes the namespaces, and with them every link. The processes in them must
// be stopped first.
func (g *segment) delete() error {
	return errors.Join(netns.Delete(g.client), netns.Delete(g.server), netns.Delete(g.site))
}
