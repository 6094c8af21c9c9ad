// Package labnet is the lab's network, built in network namespaces (internal/netns): a
// provider namespace holding the bridge the machines' taps join, a site namespace,
// joined to the bridge by a veth, where dnsmasq plays the site's DHCP server, and, when
// the lab runs one, an Omni namespace joined the same way. Interface names live inside
// the namespaces, so only the namespace names carry the prefix and several labs can run
// side by side.
package labnet

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/anvil-metal/anvil/internal/netns"
)

// Addresses of the lab network.
const (
	Bridge       = "br-lab"
	ProviderAddr = "10.77.0.1"
	SiteAddr     = "10.77.0.2"
	OmniAddr     = "10.77.0.3" // the lab's Omni (hack/internal/omnilab), in a namespace of its own
	DHCPStart    = "10.77.0.100"
	DHCPEnd      = "10.77.0.200"

	// bridgeVeth is the veth's end on the bridge, SiteVeth its end in the site namespace.
	bridgeVeth = "veth-site"
	SiteVeth   = "veth0"

	// omniBridgeVeth is the Omni veth's end on the bridge, OmniVeth its end in Omni's
	// namespace.
	omniBridgeVeth = "veth-omni"
	OmniVeth       = "veth0"
)

// The bridge's and the site's addresses: IPv4, and IPv6 for router advertisements.
var (
	providerAddrs = []netip.Prefix{netip.MustParsePrefix(ProviderAddr + "/24"), netip.MustParsePrefix("fd77::1/64")}
	siteAddrs     = []netip.Prefix{netip.MustParsePrefix(SiteAddr + "/24"), netip.MustParsePrefix("fd77::2/64")}
	omniAddr      = netip.MustParsePrefix(OmniAddr + "/24")
)

// Net is one lab network.
type Net struct {
	// ProviderNS holds the bridge, the taps and the provider; SiteNS holds dnsmasq.
	ProviderNS, SiteNS string
	// OmniNS holds the lab's Omni (UpOmni); empty: the lab has none.
	OmniNS string
	// ReplicaNS hold the provider replicas of a lab up --ha (UpReplica).
	ReplicaNS []string
}

// New names a lab network after prefix: <prefix>-lab, <prefix>-site and <prefix>-omni.
func New(prefix string) *Net {
	n := &Net{ProviderNS: prefix + "-lab", SiteNS: prefix + "-site", OmniNS: OmniNamespace(prefix)}
	for i := range MaxReplicas {
		n.ReplicaNS = append(n.ReplicaNS, ReplicaNamespace(prefix, i))
	}

	return n
}

// OmniNamespace is the name of the Omni namespace of the lab named prefix.
func OmniNamespace(prefix string) string { return prefix + "-omni" }

// Namespaces lists the lab's namespaces.
func (n *Net) Namespaces() []string {
	namespaces := []string{n.ProviderNS, n.SiteNS}
	if n.OmniNS != "" {
		namespaces = append(namespaces, n.OmniNS)
	}

	// Replicas' namespaces after the others: Up creates the first ones only.
	return append(namespaces, n.ReplicaNS...)
}

// Up creates whatever of the network is missing; it is safe to run again. Its steps are
// netlink requests and syscalls, which do not wait on anything: no context.
func (n *Net) Up() error {
	for _, ns := range n.Namespaces()[:len(n.Namespaces())-len(n.ReplicaNS)] {
		if err := netns.Create(ns); err != nil {
			return err
		}
	}

	p, err := netns.OpenLinks(n.ProviderNS)
	if err != nil {
		return err
	}

	defer p.Close()

	s, err := netns.OpenLinks(n.SiteNS)
	if err != nil {
		return err
	}

	defer s.Close()

	steps := []func() error{
		func() error { return p.SetUp("lo") },
		func() error { return s.SetUp("lo") },
		func() error { return p.AddBridge(Bridge) },
		func() error { return p.AddVeth(bridgeVeth, SiteVeth, n.SiteNS) },
		func() error { return addAddrs(p, Bridge, providerAddrs) },
		func() error { return p.SetUp(Bridge) },
		func() error { return p.SetMaster(bridgeVeth, Bridge) },
		func() error { return p.SetUp(bridgeVeth) },
		func() error { return addAddrs(s, SiteVeth, siteAddrs) },
		func() error { return s.SetUp(SiteVeth) },
	}

	for _, step := range steps {
		if err := step(); err != nil {
			return fmt.Errorf("error bringing the lab network up: %w", err)
		}
	}

	return nil
}

// UpOmni creates Omni's namespace, if missing, joined to the bridge by a veth with
// OmniAddr: the lab network must be up. The namespace has no route but the lab subnet's,
// and takes no router advertisement (the site's dnsmasq sends them on the bridge), so
// nothing in it reaches past the lab.
func (n *Net) UpOmni() error {
	if n.OmniNS == "" {
		return errors.New("the lab network has no Omni namespace")
	}

	if err := netns.Create(n.OmniNS); err != nil {
		return err
	}

	p, err := netns.OpenLinks(n.ProviderNS)
	if err != nil {
		return err
	}

	defer p.Close()

	o, err := netns.OpenLinks(n.OmniNS)
	if err != nil {
		return err
	}

	defer o.Close()

	steps := []func() error{
		func() error { return o.SetUp("lo") },
		func() error { return p.AddVeth(omniBridgeVeth, OmniVeth, n.OmniNS) },
		func() error { return p.SetMaster(omniBridgeVeth, Bridge) },
		func() error { return p.SetUp(omniBridgeVeth) },
		func() error { return n.refuseRouterAdvertisements() },
		func() error { return o.AddAddr(OmniVeth, omniAddr) },
		func() error { return o.SetUp(OmniVeth) },
	}

	for _, step := range steps {
		if err := step(); err != nil {
			return fmt.Errorf("error joining Omni's namespace to the lab network: %w", err)
		}
	}

	return nil
}

// refuseRouterAdvertisements turns off IPv6 autoconfiguration of routes on Omni's veth:
// a router advertisement would give it a default route.
func (n *Net) refuseRouterAdvertisements() error {
	return netns.Do(n.OmniNS, func() error {
		// /proc/sys/net is the namespace of the thread that opens it.
		path := "/proc/sys/net/ipv6/conf/" + OmniVeth + "/accept_ra"
		if err := os.WriteFile(path, []byte("0\n"), 0o644); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("error writing %s: %w", path, err)
		}

		return nil
	})
}

func addAddrs(l *netns.Links, link string, addrs []netip.Prefix) error {
	for _, a := range addrs {
		if err := l.AddAddr(link, a); err != nil {
			return err
		}
	}

	return nil
}

// AddTap creates a tap on the bridge in the provider namespace, if missing.
func (n *Net) AddTap(name string) error {
	p, err := netns.OpenLinks(n.ProviderNS)
	if err != nil {
		return err
	}

	defer p.Close()

	if err := p.AddTap(name); err != nil {
		return err
	}

	if err := p.SetMaster(name, Bridge); err != nil {
		return err
	}

	return p.SetUp(name)
}

// Down deletes the namespaces, and with them the bridge, veth and taps. Processes still
// in them must be stopped first (see netns.PIDs): a namespace with processes lingers.
func (n *Net) Down() error {
	var errs []error

	for _, ns := range n.Namespaces() {
		errs = append(errs, netns.Delete(ns))
	}

	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("error bringing the lab network down: %w", err)
	}

	return nil
}

// Site is what the site's dnsmasq does for the lab network.
type Site int

const (
	// SiteDHCP hands out IPv4 addresses (the provider's ProxyDHCP adds the boot options)
	// and advertises the IPv6 router, without which iPXE waits 16 s for IPv6.
	SiteDHCP Site = iota
	// SiteRouter is a site without a DHCP server, whose provider hands out the addresses
	// (full DHCP mode): the router advertisements only.
	SiteRouter
	// SiteIPv6 is an IPv6-only provisioning network: no IPv4 at all, and router
	// advertisements that send hosts to DHCPv6 (managed and other flags) and let them
	// autoconfigure (SLAAC) as well; dnsmasq answers no DHCP client itself, so the
	// provider is the network's DHCPv6 server.
	SiteIPv6
)

// IPv6Prefix is the lab network's IPv6 prefix, ProviderAddr6 the provider's address in it.
const (
	IPv6Prefix    = "fd77::/64"
	ProviderAddr6 = "fd77::1"
)

// DHCPCommand is the site's DHCP server and router, as site says.
func (n *Net) DHCPCommand(ctx context.Context, dir string, site Site) *exec.Cmd {
	args := []string{
		"--keep-in-foreground",
		"--conf-file=/dev/null",
		"--port=0", // no DNS
		"--user=root",
		"--interface=" + SiteVeth,
		"--bind-interfaces",
		"--dhcp-leasefile=" + filepath.Join(dir, "dnsmasq.leases"),
		"--enable-ra",
	}

	switch site {
	case SiteDHCP:
		args = append(args,
			"--dhcp-authoritative",
			"--dhcp-range="+DHCPStart+","+DHCPEnd+",255.255.255.0,1h",
			"--dhcp-hostsdir="+hostsDir(dir),
			"--dhcp-range=::,constructor:"+SiteVeth+",ra-only,64",
		)
	case SiteRouter:
		args = append(args, "--dhcp-range=::,constructor:"+SiteVeth+",ra-only,64")
	case SiteIPv6:
		// A stateful range makes the advertisements say "managed"; "slaac" adds the
		// autonomous flag. No host is known, so dnsmasq ignores every DHCPv6 client.
		args = append(args,
			"--dhcp-range=::1000,::1fff,constructor:"+SiteVeth+",slaac,64,1h",
			"--dhcp-ignore=tag:!known",
		)
	}

	return netns.Command(ctx, n.SiteNS, "dnsmasq", append(args,
		"--pid-file="+filepath.Join(dir, "dnsmasq.pid"),
		"--log-dhcp",
		"--log-facility="+filepath.Join(dir, "dnsmasq.log"),
	)...)
}

func hostsDir(dir string) string { return filepath.Join(dir, "dhcp-hosts") }

// PrepareDHCP creates what DHCPCommand needs in dir.
func PrepareDHCP(dir string) error {
	if err := os.MkdirAll(hostsDir(dir), 0o755); err != nil {
		return fmt.Errorf("error creating %s: %w", hostsDir(dir), err)
	}

	return nil
}

// ReserveAddress gives mac a fixed address from the site DHCP server (dnsmasq re-reads
// its hosts directory on change). Without it, dnsmasq can offer one address to two
// machines booting at once, and OVMF's own PXE gives up on the NAK that follows.
func ReserveAddress(dir, mac, addr string) error {
	name := filepath.Join(hostsDir(dir), strings.ReplaceAll(mac, ":", "-"))

	if err := os.WriteFile(name, []byte(mac+","+addr+"\n"), 0o644); err != nil {
		return fmt.Errorf("error reserving %s for %s: %w", addr, mac, err)
	}

	return nil
}
