package link

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/rfc1035label"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func ack(t *testing.T, yiaddr string, opts ...dhcpv4.Option) *dhcpv4.DHCPv4 {
	t.Helper()

	mods := []dhcpv4.Modifier{dhcpv4.WithYourIP(net.ParseIP(yiaddr)), dhcpv4.WithMessageType(dhcpv4.MessageTypeAck)}
	for _, o := range opts {
		mods = append(mods, dhcpv4.WithOption(o))
	}

	d, err := dhcpv4.New(mods...)
	require.NoError(t, err)

	return d
}

func TestPlan(t *testing.T) {
	t.Parallel()

	p := netip.MustParsePrefix
	a := netip.MustParseAddr
	def := p("0.0.0.0/0")

	for _, tc := range []struct {
		name   string
		ack    *dhcpv4.DHCPv4
		want   config
		wantOK bool
	}{
		{
			name: "typical",
			ack: ack(t, "10.201.0.50",
				dhcpv4.OptSubnetMask(net.CIDRMask(24, 32)),
				dhcpv4.OptRouter(net.ParseIP("10.201.0.1"), net.ParseIP("10.201.0.2")),
				dhcpv4.OptDNS(net.ParseIP("10.201.0.53"), net.ParseIP("1.1.1.1")),
				dhcpv4.OptHostName("node-1.lab.anvil"),
				dhcpv4.OptDomainName("lab.anvil"),
				dhcpv4.OptDomainSearch(&rfc1035label.Labels{Labels: []string{"lab.anvil", "anvil"}}),
				dhcpv4.OptIPAddressLeaseTime(10*time.Minute),
			),
			want: config{
				Address:  p("10.201.0.50/24"),
				Routes:   []route{{Dst: def, Gw: a("10.201.0.1")}},
				DNS:      []netip.Addr{a("10.201.0.53"), a("1.1.1.1")},
				Search:   []string{"lab.anvil", "anvil"},
				Hostname: "node-1",
				Renew:    5 * time.Minute,
				Expire:   10 * time.Minute,
			},
			wantOK: true,
		},
		{
			name: "/32 lease: host route to the gateway first",
			ack: ack(t, "203.0.113.7",
				dhcpv4.OptSubnetMask(net.CIDRMask(32, 32)),
				dhcpv4.OptRouter(net.ParseIP("169.254.0.1")),
				dhcpv4.OptIPAddressLeaseTime(time.Hour),
				dhcpv4.OptRenewTimeValue(20*time.Minute),
			),
			want: config{
				Address: p("203.0.113.7/32"),
				Routes:  []route{{Dst: p("169.254.0.1/32")}, {Dst: def, Gw: a("169.254.0.1")}},
				Renew:   20 * time.Minute,
				Expire:  time.Hour,
			},
			wantOK: true,
		},
		{
			name: "classless routes override option 3",
			ack: ack(t, "10.0.0.9",
				dhcpv4.OptSubnetMask(net.CIDRMask(16, 32)),
				dhcpv4.OptRouter(net.ParseIP("10.0.0.254")),
				dhcpv4.OptClasslessStaticRoute(
					&dhcpv4.Route{Dest: &net.IPNet{IP: net.IPv4(192, 168, 0, 0), Mask: net.CIDRMask(16, 32)}, Router: net.IPv4(10, 0, 0, 2)},
					&dhcpv4.Route{Dest: &net.IPNet{IP: net.IPv4(0, 0, 0, 0), Mask: net.CIDRMask(0, 32)}, Router: net.IPv4(10, 0, 0, 1)},
					&dhcpv4.Route{Dest: &net.IPNet{IP: net.IPv4(172, 16, 0, 0), Mask: net.CIDRMask(12, 32)}, Router: net.IPv4zero},
				),
			),
			want: config{
				Address: p("10.0.0.9/16"),
				Routes: []route{
					{Dst: p("192.168.0.0/16"), Gw: a("10.0.0.2")},
					{Dst: def, Gw: a("10.0.0.1")},
					{Dst: p("172.16.0.0/12")},
				},
				Renew:  30 * time.Minute,
				Expire: time.Hour,
			},
			wantOK: true,
		},
		{
			name: "no mask: classful, bad hostname dropped, renew past expiry clamped",
			ack: ack(t, "10.1.2.3",
				dhcpv4.OptHostName("bad_name;rm -rf"),
				dhcpv4.OptIPAddressLeaseTime(100*time.Second),
				dhcpv4.OptRenewTimeValue(200*time.Second),
			),
			want:   config{Address: p("10.1.2.3/8"), Renew: 50 * time.Second, Expire: 100 * time.Second},
			wantOK: true,
		},
		{name: "no address", ack: ack(t, "0.0.0.0")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			got, ok := plan(tc.ack)
			require.Equal(t, tc.wantOK, ok)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestSanitizeHostname(t *testing.T) {
	t.Parallel()

	for in, want := range map[string]string{
		"node-1":                 "node-1",
		"node-1.example.com":     "node-1",
		" Node7 ":                "Node7",
		"":                       "",
		"a b":                    "",
		"x\x00y":                 "",
		string(make([]byte, 64)): "",
	} {
		assert.Equal(t, want, sanitizeHostname(in), "%q", in)
	}
}

func TestResolvConf(t *testing.T) {
	t.Parallel()

	a := netip.MustParseAddr

	assert.Equal(t, "# written by the anvil metal agent from DHCP\nsearch lab.anvil anvil\nnameserver 10.0.0.1\nnameserver 10.0.0.2\nnameserver 10.0.0.3\n",
		string(resolvConf([]netip.Addr{a("10.0.0.1"), a("10.0.0.2"), a("10.0.0.3"), a("10.0.0.4")}, []string{"lab.anvil", "anvil"})))
	assert.Equal(t, "# written by the anvil metal agent from DHCP\nnameserver 10.0.0.1\n",
		string(resolvConf([]netip.Addr{a("10.0.0.1")}, nil)))
}

func TestRouteMessage(t *testing.T) {
	t.Parallel()

	ifc := &net.Interface{Index: 7, Name: "eth0"}

	m := routeMessage(ifc, route{Dst: netip.MustParsePrefix("0.0.0.0/0"), Gw: netip.MustParseAddr("10.0.0.1")})
	assert.EqualValues(t, 0, m.DstLength)
	assert.EqualValues(t, 1031, m.Attributes.Priority, "per-link metric keeps each link's default route")
	assert.Equal(t, net.IP{10, 0, 0, 1}, m.Attributes.Gateway)

	m = routeMessage(ifc, route{Dst: netip.MustParsePrefix("169.254.0.1/32")})
	assert.EqualValues(t, 32, m.DstLength)
	assert.Nil(t, m.Attributes.Gateway)
	assert.EqualValues(t, 253, m.Scope, "on-link route has link scope")
}
