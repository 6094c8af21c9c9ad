// Package labnet builds the lab's network out of network namespaces, with iproute2: a
// provider namespace holding the bridge the machines' taps join, and a site namespace,
// joined to the bridge by a veth, where dnsmasq plays the site's DHCP server. Interface
// names live inside the namespaces, so only the namespace names carry the prefix and
// several labs can run side by side.
package labnet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Addresses of the lab network.
const (
	Bridge       = "br-lab"
	ProviderAddr = "10.77.0.1"
	SiteAddr     = "10.77.0.2"
	providerCIDR = ProviderAddr + "/24"
	providerV6   = "fd77::1/64"
	siteCIDR     = SiteAddr + "/24"
	siteV6       = "fd77::2/64"
	DHCPStart    = "10.77.0.100"
	DHCPEnd      = "10.77.0.200"

	// bridgeVeth is the veth's end on the bridge, SiteVeth its end in the site namespace.
	bridgeVeth = "veth-site"
	SiteVeth   = "veth0"
)

// Net is one lab network.
type Net struct {
	// ProviderNS holds the bridge, the taps and the provider; SiteNS holds dnsmasq.
	ProviderNS, SiteNS string
}

// New names a lab network after prefix: <prefix>-lab and <prefix>-site.
func New(prefix string) *Net {
	return &Net{ProviderNS: prefix + "-lab", SiteNS: prefix + "-site"}
}

// Namespaces lists the lab's namespaces.
func (n *Net) Namespaces() []string { return []string{n.ProviderNS, n.SiteNS} }

// Up creates whatever of the network is missing; it is safe to run again.
func (n *Net) Up(ctx context.Context) error {
	existing, err := ListNamespaces(ctx)
	if err != nil {
		return err
	}

	for _, ns := range n.Namespaces() {
		if !contains(existing, ns) {
			if err := ip(ctx, "netns", "add", ns); err != nil {
				return err
			}
		}

		if err := ip(ctx, "-n", ns, "link", "set", "lo", "up"); err != nil {
			return err
		}
	}

	p, s := n.ProviderNS, n.SiteNS

	if !linkExists(ctx, p, Bridge) {
		// No multicast snooping: router advertisements and DHCP must reach every port.
		if err := ip(ctx, "-n", p, "link", "add", Bridge, "type", "bridge", "mcast_snooping", "0"); err != nil {
			return err
		}
	}

	if !linkExists(ctx, p, bridgeVeth) {
		if err := ip(ctx, "-n", p, "link", "add", bridgeVeth, "type", "veth", "peer", "name", SiteVeth, "netns", s); err != nil {
			return err
		}
	}

	steps := [][]string{
		{"-n", p, "addr", "replace", providerCIDR, "dev", Bridge},
		{"-n", p, "addr", "replace", providerV6, "dev", Bridge, "nodad"},
		{"-n", p, "link", "set", Bridge, "up"},
		{"-n", p, "link", "set", bridgeVeth, "master", Bridge, "up"},
		{"-n", s, "addr", "replace", siteCIDR, "dev", SiteVeth},
		{"-n", s, "addr", "replace", siteV6, "dev", SiteVeth, "nodad"},
		{"-n", s, "link", "set", SiteVeth, "up"},
	}

	for _, args := range steps {
		if err := ip(ctx, args...); err != nil {
			return err
		}
	}

	return nil
}

// AddTap creates a tap on the bridge in the provider namespace, if missing.
func (n *Net) AddTap(ctx context.Context, name string) error {
	if !linkExists(ctx, n.ProviderNS, name) {
		if err := ip(ctx, "-n", n.ProviderNS, "tuntap", "add", "dev", name, "mode", "tap"); err != nil {
			return err
		}
	}

	return ip(ctx, "-n", n.ProviderNS, "link", "set", name, "master", Bridge, "up")
}

// Down deletes the namespaces, and with them the bridge, veth and taps. Processes still
// in them must be stopped first (see NamespacePIDs): a namespace with processes lingers.
func (n *Net) Down(ctx context.Context) error {
	existing, err := ListNamespaces(ctx)
	if err != nil {
		return err
	}

	var errs []error

	for _, ns := range n.Namespaces() {
		if contains(existing, ns) {
			errs = append(errs, ip(ctx, "netns", "delete", ns))
		}
	}

	return errors.Join(errs...)
}

// Command runs name in namespace ns (ip netns exec execs it: the pid is the program's).
func Command(ctx context.Context, ns, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns, name}, args...)...)
}

// DHCPCommand is the site DHCP server: addresses only (the provider's ProxyDHCP adds the
// boot options) and router advertisements, without which iPXE waits 16 s for IPv6.
func (n *Net) DHCPCommand(ctx context.Context, dir string) *exec.Cmd {
	return Command(ctx, n.SiteNS, "dnsmasq",
		"--keep-in-foreground",
		"--conf-file=/dev/null",
		"--port=0", // no DNS
		"--user=root",
		"--interface="+SiteVeth,
		"--bind-interfaces",
		"--dhcp-authoritative",
		"--dhcp-range="+DHCPStart+","+DHCPEnd+",255.255.255.0,1h",
		"--enable-ra",
		"--dhcp-range=::,constructor:"+SiteVeth+",ra-only,64",
		"--dhcp-hostsdir="+hostsDir(dir),
		"--dhcp-leasefile="+filepath.Join(dir, "dnsmasq.leases"),
		"--pid-file="+filepath.Join(dir, "dnsmasq.pid"),
		"--log-dhcp",
		"--log-facility="+filepath.Join(dir, "dnsmasq.log"),
	)
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

// ListNamespaces lists the host's named network namespaces.
func ListNamespaces(ctx context.Context) ([]string, error) {
	out, err := exec.CommandContext(ctx, "ip", "netns", "list").Output()
	if err != nil {
		return nil, fmt.Errorf("error listing network namespaces: %w", err)
	}

	var names []string

	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			names = append(names, f[0])
		}
	}

	return names, nil
}

// NamespacePIDs lists the processes in namespace ns (none when it does not exist).
func NamespacePIDs(ctx context.Context, ns string) ([]int, error) {
	if _, err := os.Stat(filepath.Join("/run/netns", ns)); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}

	out, err := exec.CommandContext(ctx, "ip", "netns", "pids", ns).Output()
	if err != nil {
		return nil, fmt.Errorf("error listing the processes in %s: %w", ns, err)
	}

	var pids []int

	for _, f := range strings.Fields(string(out)) {
		var pid int
		if _, err := fmt.Sscan(f, &pid); err == nil {
			pids = append(pids, pid)
		}
	}

	return pids, nil
}

func linkExists(ctx context.Context, ns, name string) bool {
	return exec.CommandContext(ctx, "ip", "-n", ns, "link", "show", "dev", name).Run() == nil
}

func ip(ctx context.Context, args ...string) error {
	var stderr bytes.Buffer

	cmd := exec.CommandContext(ctx, "ip", args...)
	cmd.Stderr = &stderr

	if err := cmd.Run(); err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}

	return nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}

	return false
}
