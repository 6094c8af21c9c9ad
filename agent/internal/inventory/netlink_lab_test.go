//go:build lab

package inventory_test

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"testing"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/mdlayher/netlink"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/agent/internal/inventory"
)

// TestLabNetlinkNamespace reads links, addresses and routes with the real
// rtnetlink from a network namespace the test creates (a veth pair named
// dummy0/peer0: this kernel may lack the dummy driver).
func TestLabNetlinkNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("creating a network namespace needs root")
	}

	ns := fmt.Sprintf("anvil-inv-%d", rand.Uint32())

	ip := func(args ...string) {
		t.Helper()

		out, err := exec.Command("ip", args...).CombinedOutput()
		require.NoError(t, err, "ip %v: %s", args, out)
	}

	ip("netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })

	ip("-n", ns, "link", "set", "lo", "up")
	ip("-n", ns, "link", "add", "dummy0", "address", "02:00:00:aa:bb:cc", "type", "veth", "peer", "name", "peer0")
	ip("-n", ns, "addr", "add", "192.0.2.10/24", "dev", "dummy0")
	ip("-n", ns, "link", "set", "dummy0", "up")
	ip("-n", ns, "route", "add", "198.51.100.0/24", "via", "192.0.2.1", "metric", "1024")

	nsFile, err := os.Open("/var/run/netns/" + ns)
	require.NoError(t, err)
	t.Cleanup(func() { nsFile.Close() })

	src := testSources(t)
	src.Netlink = func() (inventory.Netlink, error) {
		return inventory.DialNetlink(&netlink.Config{NetNS: int(nsFile.Fd())})
	}

	routeID := network.RouteID(nethelpers.TableMain, nethelpers.FamilyInet4,
		netip.MustParsePrefix("198.51.100.0/24"), netip.MustParseAddr("192.0.2.1"), 1024, "dummy0")

	snapshot := runInventory(t, src)

	inv := eventually(t, snapshot, func(inv *inventory.Inventory) bool {
		return len(inv.Links) == 3 && has(inv.Addresses, "dummy0/192.0.2.10/24") && has(inv.Routes, routeID)
	})

	links := map[string]*network.LinkStatus{}
	for _, l := range inv.Links {
		links[l.Metadata().ID()] = l
	}

	require.Contains(t, links, "lo")
	require.Contains(t, links, "dummy0")

	dummy := links["dummy0"].TypedSpec()
	assert.Equal(t, "veth", dummy.Kind)
	assert.Equal(t, nethelpers.LinkEther, dummy.Type)
	assert.Equal(t, "02:00:00:aa:bb:cc", dummy.HardwareAddr.String())
	assert.NotZero(t, dummy.Index)
	assert.Equal(t, nethelpers.LinkLoopbck, links["lo"].TypedSpec().Type)

	for _, a := range inv.Addresses {
		if a.Metadata().ID() == "dummy0/192.0.2.10/24" {
			assert.Equal(t, netip.MustParsePrefix("192.0.2.10/24"), a.TypedSpec().Address)
			assert.Equal(t, "dummy0", a.TypedSpec().LinkName)
			assert.Equal(t, nethelpers.FamilyInet4, a.TypedSpec().Family)
		}
	}

	for _, r := range inv.Routes {
		if r.Metadata().ID() == routeID {
			assert.Equal(t, "dummy0", r.TypedSpec().OutLinkName)
			assert.Equal(t, nethelpers.TableMain, r.TypedSpec().Table)
		}
	}

	// A veth link is not physical: no NIC in the summary.
	assert.Empty(t, inv.Summarize().NICs)

	// The address goes: its resource follows.
	ip("-n", ns, "addr", "del", "192.0.2.10/24", "dev", "dummy0")
	eventually(t, snapshot, func(inv *inventory.Inventory) bool {
		return !has(inv.Addresses, "dummy0/192.0.2.10/24") && !has(inv.Routes, routeID)
	})
}

func has[T resource.Resource](items []T, id string) bool {
	for _, item := range items {
		if item.Metadata().ID() == id {
			return true
		}
	}

	return false
}
