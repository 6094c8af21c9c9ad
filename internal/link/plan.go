package link

import (
	"bytes"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// config is what a DHCPv4 lease asks of the machine; plan derives it from
// the ACK alone, so it is tested without a network.
type config struct {
	Address  netip.Prefix
	Routes   []route
	DNS      []netip.Addr
	Search   []string
	Hostname string
	// Renew and Expire are durations from when the lease was granted.
	Renew, Expire time.Duration
}

type route struct {
	Dst netip.Prefix
	Gw  netip.Addr // invalid for an on-link route
}

// defaultLease is assumed when a server omits option 51.
const defaultLease = time.Hour

func plan(ack *dhcpv4.DHCPv4) (config, bool) {
	ip, ok := netip.AddrFromSlice(ack.YourIPAddr.To4())
	if !ok || ip.IsUnspecified() {
		return config{}, false
	}

	mask := ack.SubnetMask()
	if mask == nil {
		// No option 1: fall back to the address's class, as old clients do.
		mask = net.IP(ip.AsSlice()).DefaultMask()
	}

	ones, bits := mask.Size()
	if bits != 32 {
		ones = 32
	}

	c := config{Address: netip.PrefixFrom(ip, ones)}

	// RFC 3442: with classless static routes present, option 3 is ignored.
	if csr := ack.ClasslessStaticRoute(); len(csr) > 0 {
		for _, r := range csr {
			dst, ok := prefixOf(r.Dest)
			if !ok {
				continue
			}

			gw, _ := netip.AddrFromSlice(r.Router.To4())
			if gw.IsUnspecified() {
				gw = netip.Addr{}
			}

			c.Routes = append(c.Routes, c.onLink(route{Dst: dst, Gw: gw})...)
		}
	} else if rs := ack.Router(); len(rs) > 0 {
		if gw, ok := netip.AddrFromSlice(rs[0].To4()); ok && !gw.IsUnspecified() {
			c.Routes = c.onLink(route{Dst: netip.PrefixFrom(netip.IPv4Unspecified(), 0), Gw: gw})
		}
	}

	for _, d := range ack.DNS() {
		if a, ok := netip.AddrFromSlice(d.To4()); ok && !a.IsUnspecified() {
			c.DNS = append(c.DNS, a)
		}
	}

	if d := strings.TrimSpace(ack.DomainName()); d != "" {
		c.Search = append(c.Search, d)
	}

	if ds := ack.DomainSearch(); ds != nil {
		for _, l := range ds.Labels {
			if l != "" && !contains(c.Search, l) {
				c.Search = append(c.Search, l)
			}
		}
	}

	c.Hostname = sanitizeHostname(ack.HostName())
	c.Expire = ack.IPAddressLeaseTime(defaultLease)
	c.Renew = ack.IPAddressRenewalTime(c.Expire / 2)

	if c.Expire <= 0 {
		c.Expire = defaultLease
	}

	if c.Renew <= 0 || c.Renew >= c.Expire {
		c.Renew = c.Expire / 2
	}

	return c, true
}

// onLink prepends a host route to r's gateway when the gateway lies outside
// the leased subnet (/32 leases, as some clouds and routed fabrics hand
// out): the kernel refuses a route through an unreachable gateway.
func (c config) onLink(r route) []route {
	if !r.Gw.IsValid() || c.Address.Contains(r.Gw) {
		return []route{r}
	}

	return []route{{Dst: netip.PrefixFrom(r.Gw, 32)}, r}
}

func prefixOf(n *net.IPNet) (netip.Prefix, bool) {
	if n == nil {
		return netip.Prefix{}, false
	}

	a, ok := netip.AddrFromSlice(n.IP.To4())
	if !ok {
		return netip.Prefix{}, false
	}

	ones, bits := n.Mask.Size()
	if bits != 32 {
		return netip.Prefix{}, false
	}

	return netip.PrefixFrom(a, ones).Masked(), true
}

// sanitizeHostname keeps the first label of a hostname made of letters,
// digits and dashes; anything else from the wire is refused.
func sanitizeHostname(h string) string {
	h, _, _ = strings.Cut(strings.TrimSpace(h), ".")
	if h == "" || len(h) > 63 {
		return ""
	}

	for _, c := range []byte(h) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			return ""
		}
	}

	return h
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}

	return false
}

// resolvConf renders /etc/resolv.conf for the given servers and search
// domains; glibc and musl read at most three nameservers.
func resolvConf(dns []netip.Addr, search []string) []byte {
	var b bytes.Buffer

	b.WriteString("# written by the anvil metal agent from DHCP\n")

	if len(search) > 0 {
		b.WriteString("search " + strings.Join(search, " ") + "\n")
	}

	for i, d := range dns {
		if i == 3 {
			break
		}

		b.WriteString("nameserver " + d.String() + "\n")
	}

	return b.Bytes()
}
