package inventory_test

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/jsimonetti/rtnetlink/v2"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
	"github.com/siderolabs/talos/pkg/machinery/resources/hardware"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	"golang.org/x/sys/unix"

	"github.com/anvil-metal/anvil/agent/internal/inventory"
)

// The resources the inventory derives for a Talos-compatible maintenance API:
// how each is built from its inputs, then the controllers on the real runtime.

func linkStatus(index uint32, spec network.LinkStatusSpec) *network.LinkStatus {
	l := network.NewLinkStatus(network.NamespaceName, "link")
	spec.Index = index
	*l.TypedSpec() = spec

	return l
}

func addressStatus(linkIndex uint32, prefix string, scope nethelpers.Scope) *network.AddressStatus {
	a := network.NewAddressStatus(network.NamespaceName, prefix)
	*a.TypedSpec() = network.AddressStatusSpec{Address: netip.MustParsePrefix(prefix), LinkIndex: linkIndex, Scope: scope}

	return a
}

func prefixes(s ...string) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(s))
	for _, p := range s {
		out = append(out, netip.MustParsePrefix(p))
	}

	return out
}

func TestCurrentAddresses(t *testing.T) {
	t.Parallel()

	const (
		lo = iota + 1
		eth0
		eth1
		wg
		bond
	)

	links := []*network.LinkStatus{
		linkStatus(lo, network.LinkStatusSpec{Type: nethelpers.LinkLoopbck, OperationalState: nethelpers.OperStateUnknown}),
		linkStatus(eth0, network.LinkStatusSpec{Type: nethelpers.LinkEther, OperationalState: nethelpers.OperStateUp, LinkState: true}),
		// Up but without carrier: a physical link whose cable is out.
		linkStatus(eth1, network.LinkStatusSpec{Type: nethelpers.LinkEther, OperationalState: nethelpers.OperStateUp}),
		// A WireGuard link reports "unknown" and is not physical: it counts as up.
		linkStatus(wg, network.LinkStatusSpec{Type: nethelpers.LinkNone, Kind: "wireguard", OperationalState: nethelpers.OperStateUnknown}),
		linkStatus(bond, network.LinkStatusSpec{Type: nethelpers.LinkEther, Kind: "bond", OperationalState: nethelpers.OperStateDown}),
	}

	for _, tc := range []struct {
		name  string
		addrs []*network.AddressStatus
		want  []netip.Prefix
	}{
		{name: "nothing", want: nil},
		{
			name: "global addresses on up links, sorted",
			addrs: []*network.AddressStatus{
				addressStatus(eth0, "192.168.1.20/24", nethelpers.ScopeGlobal),
				addressStatus(eth0, "10.0.0.5/8", nethelpers.ScopeGlobal),
				addressStatus(eth0, "2001:db8::5/64", nethelpers.ScopeGlobal),
				addressStatus(wg, "fdae:41e4:649b:9303::a/64", nethelpers.ScopeGlobal),
			},
			want: prefixes("10.0.0.5/8", "192.168.1.20/24", "2001:db8::5/64", "fdae:41e4:649b:9303::a/64"),
		},
		{
			name: "loopback, link-local and host scope are left out",
			addrs: []*network.AddressStatus{
				addressStatus(lo, "127.0.0.1/8", nethelpers.ScopeHost),
				addressStatus(lo, "::1/128", nethelpers.ScopeHost),
				addressStatus(eth0, "fe80::1/64", nethelpers.ScopeLink),
				addressStatus(eth0, "169.254.3.4/16", nethelpers.ScopeGlobal),
				addressStatus(eth0, "10.0.0.5/24", nethelpers.ScopeGlobal),
			},
			want: prefixes("10.0.0.5/24"),
		},
		{
			name: "links down or without carrier are left out",
			addrs: []*network.AddressStatus{
				addressStatus(eth1, "10.1.0.5/24", nethelpers.ScopeGlobal),
				addressStatus(bond, "10.2.0.5/24", nethelpers.ScopeGlobal),
				addressStatus(99, "10.3.0.5/24", nethelpers.ScopeGlobal),
				addressStatus(eth0, "10.0.0.5/24", nethelpers.ScopeGlobal),
			},
			want: prefixes("10.0.0.5/24"),
		},
		{
			name: "the same address on two links once; prefix lengths apart",
			addrs: []*network.AddressStatus{
				addressStatus(eth0, "10.0.0.5/24", nethelpers.ScopeGlobal),
				addressStatus(wg, "10.0.0.5/24", nethelpers.ScopeGlobal),
				addressStatus(wg, "10.0.0.5/32", nethelpers.ScopeGlobal),
			},
			want: prefixes("10.0.0.5/24", "10.0.0.5/32"),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			assert.Equal(t, tc.want, inventory.CurrentAddresses(tc.addrs, links))
		})
	}
}

func TestKernelCmdlineOf(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct{ raw, want string }{
		{"", ""},
		{"console=ttyS0 talos.platform=metal\n", "console=ttyS0 talos.platform=metal"},
		{"  quiet  \n", "quiet"},
		{"console=ttyS0 anvil.token=v1.secret.sig anvil.machine=m1\n", "console=ttyS0 anvil.token=<redacted> anvil.machine=m1"},
		// Omni's join token too, as the kernel log shipped to Omni hides it.
		{
			"siderolink.api=grpc://10.77.0.3:8090?jointoken=v2%3Asecret talos.events.sink=[fdae::1]:8091 anvil.token=v1.secret.sig\n",
			"siderolink.api=grpc://10.77.0.3:8090?jointoken=<redacted> talos.events.sink=[fdae::1]:8091 anvil.token=<redacted>",
		},
	} {
		assert.Equal(t, runtimeres.KernelCmdlineSpec{Cmdline: tc.want}, inventory.KernelCmdlineOf(tc.raw), "%q", tc.raw)
	}
}

func TestPlatformMetadataOf(t *testing.T) {
	t.Parallel()

	system := hardware.NewSystemInformation(hardware.SystemInformationID)
	system.TypedSpec().UUID = "4c4c4544-0042-3510-8052-b4c04f4e3732"

	for _, tc := range []struct {
		name    string
		cmdline string
		system  *hardware.SystemInformation
		want    runtimeres.PlatformMetadataSpec
	}{
		{name: "nothing known", want: runtimeres.PlatformMetadataSpec{Platform: "metal"}},
		{
			name:    "hostname from the command line, instance from SMBIOS",
			cmdline: "console=ttyS0 talos.hostname=rack1-node7 ip=dhcp\n",
			system:  system,
			want:    runtimeres.PlatformMetadataSpec{Platform: "metal", Hostname: "rack1-node7", InstanceID: "4c4c4544-0042-3510-8052-b4c04f4e3732"},
		},
		{
			name:    "the first talos.hostname wins",
			cmdline: "talos.hostname=a talos.hostname=b",
			want:    runtimeres.PlatformMetadataSpec{Platform: "metal", Hostname: "a"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			assert.Equal(t, tc.want, inventory.PlatformMetadataOf(tc.cmdline, tc.system))
		})
	}
}

// fakeNetlink is a machine with a loopback, a NIC with carrier and addresses, and a
// NIC without carrier.
type fakeNetlink struct{}

func (fakeNetlink) Links() ([]rtnetlink.LinkMessage, error) {
	link := func(index uint32, name string, typ uint16, flags uint32, oper rtnetlink.OperationalState) rtnetlink.LinkMessage {
		return rtnetlink.LinkMessage{Type: typ, Index: index, Flags: flags, Attributes: &rtnetlink.LinkAttributes{
			Name: name, OperationalState: oper, Address: net.HardwareAddr{0x52, 0x54, 0, 0, 0, byte(index)},
		}}
	}

	return []rtnetlink.LinkMessage{
		link(1, "lo", unix.ARPHRD_LOOPBACK, unix.IFF_UP|unix.IFF_RUNNING|unix.IFF_LOOPBACK, rtnetlink.OperStateUnknown),
		link(2, "eth0", unix.ARPHRD_ETHER, unix.IFF_UP|unix.IFF_RUNNING, rtnetlink.OperStateUp),
		link(3, "eth1", unix.ARPHRD_ETHER, unix.IFF_UP, rtnetlink.OperStateDown),
	}, nil
}

func (fakeNetlink) Addresses() ([]rtnetlink.AddressMessage, error) {
	addr := func(index uint32, ip string, bits uint8, scope uint8) rtnetlink.AddressMessage {
		family := uint8(unix.AF_INET6)
		if netip.MustParseAddr(ip).Is4() {
			family = unix.AF_INET
		}

		return rtnetlink.AddressMessage{Family: family, PrefixLength: bits, Scope: scope, Index: index,
			Attributes: &rtnetlink.AddressAttributes{Address: net.ParseIP(ip)}}
	}

	return []rtnetlink.AddressMessage{
		addr(1, "127.0.0.1", 8, unix.RT_SCOPE_HOST),
		addr(2, "192.168.10.7", 24, unix.RT_SCOPE_UNIVERSE),
		addr(2, "fe80::5054:ff:fe00:2", 64, unix.RT_SCOPE_LINK),
		addr(2, "2001:db8::7", 64, unix.RT_SCOPE_UNIVERSE),
		addr(3, "10.9.9.9", 24, unix.RT_SCOPE_UNIVERSE),
	}, nil
}

func (fakeNetlink) Routes() ([]rtnetlink.RouteMessage, error) { return nil, nil }
func (fakeNetlink) Close() error                              { return nil }

// runState runs the collector on a fresh state until the test ends and returns the state.
func runState(t *testing.T, src inventory.Sources) state.State {
	t.Helper()

	ctx, cancel := context.WithCancel(t.Context())

	st, err := inventory.NewState(ctx)
	require.NoError(t, err)

	c := inventory.NewCollector(st, src, zaptest.NewLogger(t))

	var wg sync.WaitGroup

	wg.Go(func() { assert.NoError(t, c.Run(ctx)) })

	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})

	return st
}

func TestDerivedResources(t *testing.T) {
	t.Parallel()

	src := testSources(t)
	src.Netlink = func() (inventory.Netlink, error) { return fakeNetlink{}, nil }
	src.SMBIOS = inventory.SMBIOSFile(goSMBIOSTestdata(t) + "/Dell-PowerEdge-R630-Dual-Xeon.dmi")

	st := runState(t, src)
	ctx := t.Context()

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		addrs, err := safe.StateGetByID[*network.NodeAddress](ctx, st, network.NodeAddressCurrentID)
		if !assert.NoError(c, err) {
			return
		}

		assert.Equal(c, prefixes("192.168.10.7/24", "2001:db8::7/64"), addrs.TypedSpec().Addresses)
		assert.Equal(c, nethelpers.AddressSortAlgorithmV1, addrs.TypedSpec().SortAlgorithm)
	}, 10*time.Second, 20*time.Millisecond)

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		cmdline, err := safe.StateGetByID[*runtimeres.KernelCmdline](ctx, st, runtimeres.KernelCmdlineID)
		if assert.NoError(c, err) {
			assert.Equal(c, "BOOT_IMAGE=/vmlinuz console=ttyS0 talos.hostname=rack1-node7 anvil.provider=10.0.0.1:8080",
				cmdline.TypedSpec().Cmdline)
		}

		system, err := safe.StateGetByID[*hardware.SystemInformation](ctx, st, hardware.SystemInformationID)
		if !assert.NoError(c, err) {
			return
		}

		platform, err := safe.StateGetByID[*runtimeres.PlatformMetadata](ctx, st, runtimeres.PlatformMetadataID)
		if assert.NoError(c, err) {
			assert.Equal(c, runtimeres.PlatformMetadataSpec{Platform: "metal", Hostname: "rack1-node7", InstanceID: system.TypedSpec().UUID},
				*platform.TypedSpec())
		}
	}, 10*time.Second, 20*time.Millisecond)
}
