// Package link brings up a machine's physical network links and configures
// them from DHCPv4: address, routes, DNS and hostname, renewed in the
// background. IPv6 comes from router advertisements, which the kernel
// handles itself once a link is up.
package link

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/jsimonetti/rtnetlink/v2/rtnl"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// Options configure Start.
type Options struct {
	Logger *zap.Logger
	// Select picks the links to configure by name; nil means physical
	// links: those with a device under SysClassNet. "lo" is never picked.
	Select func(name string) bool
	// SysClassNet defaults to /sys/class/net.
	SysClassNet string
	// ResolvConf is written with the leases' DNS servers; "" means
	// /etc/resolv.conf, "-" not to write one.
	ResolvConf string
	// KeepHostname stops the lease's hostname (option 12) replacing an
	// unset one.
	KeepHostname bool
	// Attempt bounds one DHCP exchange; 0 means 15s.
	Attempt time.Duration
	// Backoff is the first wait after a failed attempt, doubling up to
	// MaxBackoff; 0 means 1s and 30s.
	Backoff, MaxBackoff time.Duration
}

// Manager runs DHCP on the selected links until its context ends.
type Manager struct {
	opts Options
	log  *zap.Logger
	conn *rtnl.Conn
	wg   sync.WaitGroup

	mu      sync.Mutex
	links   map[string]*linkState
	changed chan struct{} // closed and replaced on every change
}

type linkState struct {
	ifc    *net.Interface
	lease  *config
	server netip.Addr
	got    time.Time
	err    error
}

// Summary is the network as the agent configured it.
type Summary struct {
	Links []Status
}

// Status is one link's state.
type Status struct {
	Name string
	MAC  string
	// Addresses are the link's global addresses as the kernel has them:
	// the DHCPv4 lease and any SLAAC IPv6 addresses.
	Addresses []netip.Prefix
	// Lease details, when DHCPv4 gave one.
	Gateways   []netip.Addr
	DNS        []netip.Addr
	Hostname   string
	DHCPServer netip.Addr
	Expires    time.Time
	// Err is the last failure on this link, if it has no lease.
	Err string
}

// HasAddress reports whether any link has a global address.
func (s Summary) HasAddress() bool {
	for _, l := range s.Links {
		if len(l.Addresses) > 0 {
			return true
		}
	}

	return false
}

// Link returns the named link's status.
func (s Summary) Link(name string) (Status, bool) {
	for _, l := range s.Links {
		if l.Name == name {
			return l, true
		}
	}

	return Status{}, false
}

// Start brings the selected links up and runs DHCP on each, concurrently,
// in goroutines that live until ctx ends; Wait waits for them.
func Start(ctx context.Context, opts Options) (*Manager, error) {
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}

	if opts.SysClassNet == "" {
		opts.SysClassNet = "/sys/class/net"
	}

	if opts.ResolvConf == "" {
		opts.ResolvConf = "/etc/resolv.conf"
	}

	if opts.Attempt <= 0 {
		opts.Attempt = 15 * time.Second
	}

	if opts.Backoff <= 0 {
		opts.Backoff = time.Second
	}

	if opts.MaxBackoff < opts.Backoff {
		opts.MaxBackoff = max(30*time.Second, opts.Backoff)
	}

	if opts.Select == nil {
		opts.Select = func(name string) bool { return IsPhysical(opts.SysClassNet, name) }
	}

	conn, err := rtnl.Dial(nil)
	if err != nil {
		return nil, fmt.Errorf("dialing rtnetlink: %w", err)
	}

	ifcs, err := conn.Links()
	if err != nil {
		conn.Close()

		return nil, fmt.Errorf("listing links: %w", err)
	}

	m := &Manager{
		opts:    opts,
		log:     opts.Logger,
		conn:    conn,
		links:   map[string]*linkState{},
		changed: make(chan struct{}),
	}

	for _, ifc := range ifcs {
		if ifc.Name == "lo" || ifc.Flags&net.FlagLoopback != 0 || !opts.Select(ifc.Name) {
			continue
		}

		m.links[ifc.Name] = &linkState{ifc: ifc}
		m.wg.Go(func() { m.run(ctx, ifc) })
	}

	if len(m.links) == 0 {
		m.log.Warn("no network links to configure")
	}

	// The rtnetlink socket is shared by the link goroutines; close it once
	// they are all gone.
	go func() {
		m.wg.Wait()
		conn.Close()
	}()

	return m, nil
}

// IsPhysical reports whether a link is backed by a device (a NIC), not a
// virtual link such as a bridge, veth or tunnel.
func IsPhysical(sysClassNet, name string) bool {
	_, err := os.Stat(filepath.Join(sysClassNet, name, "device"))

	return err == nil
}

// Wait returns once every link goroutine has stopped (after ctx ends).
func (m *Manager) Wait() { m.wg.Wait() }

// WaitAddress waits until some link has a global address, or timeout or
// ctx ends, and returns the summary at that point.
func (m *Manager) WaitAddress(ctx context.Context, timeout time.Duration) (Summary, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	// Poll as well as wake on leases: SLAAC addresses arrive without one.
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()

	for {
		m.mu.Lock()
		changed := m.changed
		m.mu.Unlock()

		s := m.Summary()
		if s.HasAddress() {
			return s, nil
		}

		select {
		case <-ctx.Done():
			return s, fmt.Errorf("waiting for a network address: %w", ctx.Err())
		case <-changed:
		case <-tick.C:
		}
	}
}

// Summary reports every configured link, sorted by name.
func (m *Manager) Summary() Summary {
	m.mu.Lock()
	defer m.mu.Unlock()

	var s Summary

	for _, ls := range m.links {
		st := Status{Name: ls.ifc.Name, MAC: ls.ifc.HardwareAddr.String()}
		st.Addresses = globalAddrs(ls.ifc)

		if ls.lease != nil {
			for _, r := range ls.lease.Routes {
				if r.Gw.IsValid() && !slices.Contains(st.Gateways, r.Gw) {
					st.Gateways = append(st.Gateways, r.Gw)
				}
			}

			st.DNS = ls.lease.DNS
			st.Hostname = ls.lease.Hostname
			st.DHCPServer = ls.server
			st.Expires = ls.got.Add(ls.lease.Expire)
		} else if ls.err != nil {
			st.Err = ls.err.Error()
		}

		s.Links = append(s.Links, st)
	}

	slices.SortFunc(s.Links, func(a, b Status) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}

		return 0
	})

	return s
}

// globalAddrs lists the link's global-scope addresses from the kernel.
func globalAddrs(ifc *net.Interface) []netip.Prefix {
	// net.Interface.Addrs asks rtnetlink afresh on every call.
	addrs, err := ifc.Addrs()
	if err != nil {
		return nil
	}

	var out []netip.Prefix

	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok {
			continue
		}

		ip, ok := netip.AddrFromSlice(n.IP)
		if !ok {
			continue
		}

		ip = ip.Unmap()
		if !ip.IsGlobalUnicast() {
			continue
		}

		ones, _ := n.Mask.Size()
		out = append(out, netip.PrefixFrom(ip, ones))
	}

	return out
}

// update changes a link's state under the lock and wakes WaitAddress.
func (m *Manager) update(name string, fn func(*linkState)) {
	m.mu.Lock()
	defer m.mu.Unlock()

	fn(m.links[name])
	close(m.changed)
	m.changed = make(chan struct{})
}

// writeDNS rewrites resolv.conf from every lease held.
func (m *Manager) writeDNS() {
	if m.opts.ResolvConf == "-" {
		return
	}

	m.mu.Lock()

	names := make([]string, 0, len(m.links))
	for n := range m.links {
		names = append(names, n)
	}

	slices.Sort(names)

	var (
		dns    []netip.Addr
		search []string
	)

	for _, n := range names {
		if l := m.links[n].lease; l != nil {
			for _, d := range l.DNS {
				if !slices.Contains(dns, d) {
					dns = append(dns, d)
				}
			}

			for _, s := range l.Search {
				if !slices.Contains(search, s) {
					search = append(search, s)
				}
			}
		}
	}

	m.mu.Unlock()

	if len(dns) == 0 {
		return
	}

	// Written in place, not renamed over: /etc/resolv.conf is often a
	// bind mount (containers, `ip netns exec`).
	if err := os.WriteFile(m.opts.ResolvConf, resolvConf(dns, search), 0o644); err != nil {
		m.log.Warn("writing resolv.conf", zap.Error(err))
	}
}

// setHostname sets the lease's hostname if the machine has none yet.
func (m *Manager) setHostname(name string) {
	if m.opts.KeepHostname || name == "" {
		return
	}

	cur, _ := os.Hostname()
	if cur != "" && cur != "(none)" && cur != "localhost" {
		return
	}

	if err := unix.Sethostname([]byte(name)); err != nil {
		m.log.Warn("setting hostname", zap.String("hostname", name), zap.Error(err))

		return
	}

	m.log.Info("hostname set from DHCP", zap.String("hostname", name))
}

var errNoAddress = errors.New("DHCP ACK without an address")
