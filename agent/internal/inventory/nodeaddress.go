package inventory

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"go.uber.org/zap"
)

// NodeAddressController publishes network.NodeAddress "current": the machine's
// addresses on links that are up, as Talos computes them in maintenance mode. Omni
// reads it (less the SideroLink address) as the machine's addresses. Talos' other
// node addresses (default, routed, accumulative) pick addresses for etcd and the
// kubelet, which a machine in maintenance does not run, so they are left out.
type NodeAddressController struct {
	firstPass
}

// Name implements controller.Controller.
func (ctrl *NodeAddressController) Name() string { return "inventory.NodeAddressController" }

// Inputs implements controller.Controller.
func (ctrl *NodeAddressController) Inputs() []controller.Input {
	return []controller.Input{
		{Namespace: network.NamespaceName, Type: network.AddressStatusType, Kind: controller.InputWeak},
		{Namespace: network.NamespaceName, Type: network.LinkStatusType, Kind: controller.InputWeak},
	}
}

// Outputs implements controller.Controller.
func (ctrl *NodeAddressController) Outputs() []controller.Output {
	return []controller.Output{{Type: network.NodeAddressType, Kind: controller.OutputExclusive}}
}

// Run implements controller.Controller: it recomputes on every change of its inputs.
func (ctrl *NodeAddressController) Run(ctx context.Context, r controller.Runtime, _ *zap.Logger) error {
	pace := ctrl.pacer(nil)

	for pace.next(ctx, r) {
		links, err := safe.ReaderListAll[*network.LinkStatus](ctx, r)
		if err != nil {
			return fmt.Errorf("error listing links: %w", err)
		}

		addrs, err := safe.ReaderListAll[*network.AddressStatus](ctx, r)
		if err != nil {
			return fmt.Errorf("error listing addresses: %w", err)
		}

		current := currentAddresses(slices.Collect(addrs.All()), slices.Collect(links.All()))

		if err = safe.WriterModify(ctx, r, network.NewNodeAddress(network.NamespaceName, network.NodeAddressCurrentID), func(res *network.NodeAddress) error {
			*res.TypedSpec() = network.NodeAddressSpec{
				Addresses: current,
				// Talos sorts with the first algorithm unless a machine config asks
				// for another, and a machine in maintenance has none.
				SortAlgorithm: nethelpers.AddressSortAlgorithmV1,
			}

			return nil
		}); err != nil {
			return fmt.Errorf("error updating node addresses: %w", err)
		}
	}

	return nil
}

// currentAddresses picks and orders the addresses as Talos' NodeAddressController
// does for "current": not link-local, host or loopback in scope or kind, not
// multicast; on a link that is up (operationally up or unknown, and a physical
// link with carrier); sorted by address, then prefix length, without duplicates.
func currentAddresses(addrs []*network.AddressStatus, links []*network.LinkStatus) []netip.Prefix {
	up := map[uint32]bool{}

	for _, link := range links {
		spec := link.TypedSpec()

		if spec.OperationalState != nethelpers.OperStateUp && spec.OperationalState != nethelpers.OperStateUnknown {
			continue
		}

		if spec.Physical() && !spec.LinkState {
			continue
		}

		up[spec.Index] = true
	}

	var current []netip.Prefix

	for _, addr := range addrs {
		spec := addr.TypedSpec()
		ip := spec.Address.Addr()

		if spec.Scope >= nethelpers.ScopeLink || ip.IsLoopback() || ip.IsMulticast() || ip.IsLinkLocalUnicast() {
			continue
		}

		if up[spec.LinkIndex] {
			current = append(current, spec.Address)
		}
	}

	slices.SortFunc(current, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}

		return a.Bits() - b.Bits()
	})

	return slices.Compact(current)
}
