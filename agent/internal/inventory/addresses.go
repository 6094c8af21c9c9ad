package inventory

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"go.uber.org/zap"
)

// AddressesController publishes every address as a network.AddressStatus
// with Talos' ID ("eth0/10.0.0.5/24"); DHCP changes them, so it polls.
type AddressesController struct {
	Netlink  func() (Netlink, error)
	Interval time.Duration

	firstPass
}

// Name implements controller.Controller.
func (ctrl *AddressesController) Name() string { return "inventory.AddressesController" }

// Inputs implements controller.Controller.
func (ctrl *AddressesController) Inputs() []controller.Input { return nil }

// Outputs implements controller.Controller.
func (ctrl *AddressesController) Outputs() []controller.Output {
	return []controller.Output{{Type: network.AddressStatusType, Kind: controller.OutputExclusive}}
}

// Run implements controller.Controller.
func (ctrl *AddressesController) Run(ctx context.Context, r controller.Runtime, logger *zap.Logger) error {
	p := netlinkPoller{dial: ctrl.Netlink}

	return p.poll(ctx, r, logger, ctrl.Interval, &ctrl.firstPass, func(conn Netlink) (error, error) {
		names, err := linkNames(conn)
		if err != nil {
			return fmt.Errorf("error listing links: %w", err), nil
		}

		addrs, err := conn.Addresses()
		if err != nil {
			return fmt.Errorf("error listing addresses: %w", err), nil
		}

		r.StartTrackingOutputs()

		for _, addr := range addrs {
			ip, ok := netip.AddrFromSlice(addr.Attributes.Address)
			if !ok {
				continue
			}

			prefix := netip.PrefixFrom(ip.Unmap(), int(addr.PrefixLength))
			id := network.AddressID(names[addr.Index], prefix)

			if err = safe.WriterModify(ctx, r, network.NewAddressStatus(network.NamespaceName, id), func(res *network.AddressStatus) error {
				spec := res.TypedSpec()
				*spec = network.AddressStatusSpec{
					Address:   prefix,
					LinkIndex: addr.Index,
					LinkName:  names[addr.Index],
					Family:    nethelpers.Family(addr.Family),
					Scope:     nethelpers.Scope(addr.Scope),
					Flags:     nethelpers.AddressFlags(addr.Attributes.Flags),
					Priority:  addr.Attributes.Priority,
				}
				spec.Local, _ = netip.AddrFromSlice(addr.Attributes.Local)
				spec.Broadcast, _ = netip.AddrFromSlice(addr.Attributes.Broadcast)
				spec.Anycast, _ = netip.AddrFromSlice(addr.Attributes.Anycast)
				spec.Multicast, _ = netip.AddrFromSlice(addr.Attributes.Multicast)

				return nil
			}); err != nil {
				return nil, fmt.Errorf("error updating address %s: %w", id, err)
			}
		}

		if err = safe.CleanupOutputs[*network.AddressStatus](ctx, r); err != nil {
			return nil, fmt.Errorf("error cleaning up addresses: %w", err)
		}

		return nil, nil
	})
}
