package inventory

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/jsimonetti/rtnetlink/v2"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"go.uber.org/zap"
)

// RoutesController publishes every route of every table as a
// network.RouteStatus with Talos' ID ("inet4/10.0.0.1//1024").
type RoutesController struct {
	Netlink  func() (Netlink, error)
	Interval time.Duration

	firstPass
}

// Name implements controller.Controller.
func (ctrl *RoutesController) Name() string { return "inventory.RoutesController" }

// Inputs implements controller.Controller.
func (ctrl *RoutesController) Inputs() []controller.Input { return nil }

// Outputs implements controller.Controller.
func (ctrl *RoutesController) Outputs() []controller.Output {
	return []controller.Output{{Type: network.RouteStatusType, Kind: controller.OutputExclusive}}
}

// Run implements controller.Controller.
func (ctrl *RoutesController) Run(ctx context.Context, r controller.Runtime, logger *zap.Logger) error {
	p := netlinkPoller{dial: ctrl.Netlink}

	return p.poll(ctx, r, logger, ctrl.Interval, &ctrl.firstPass, func(conn Netlink) (error, error) {
		names, err := linkNames(conn)
		if err != nil {
			return fmt.Errorf("error listing links: %w", err), nil
		}

		routes, err := conn.Routes()
		if err != nil {
			return fmt.Errorf("error listing routes: %w", err), nil
		}

		r.StartTrackingOutputs()

		for _, route := range routes {
			spec := routeSpec(&route, names)
			id := network.RouteID(spec.Table, spec.Family, spec.Destination, spec.Gateway, spec.Priority, spec.OutLinkName)

			if err = safe.WriterModify(ctx, r, network.NewRouteStatus(network.NamespaceName, id), func(res *network.RouteStatus) error {
				*res.TypedSpec() = spec

				return nil
			}); err != nil {
				return nil, fmt.Errorf("error updating route %s: %w", id, err)
			}
		}

		if err = safe.CleanupOutputs[*network.RouteStatus](ctx, r); err != nil {
			return nil, fmt.Errorf("error cleaning up routes: %w", err)
		}

		return nil, nil
	})
}

func routeSpec(route *rtnetlink.RouteMessage, names map[uint32]string) network.RouteStatusSpec {
	attrs := route.Attributes

	// The 8-bit header table overflows for tables above 255; the attribute does not.
	table := uint32(route.Table)
	if attrs.Table != 0 {
		table = attrs.Table
	}

	spec := network.RouteStatusSpec{
		Family:       nethelpers.Family(route.Family),
		OutLinkIndex: attrs.OutIface,
		OutLinkName:  names[attrs.OutIface],
		Table:        nethelpers.RoutingTable(table),
		Priority:     attrs.Priority,
		Scope:        nethelpers.Scope(route.Scope),
		Type:         nethelpers.RouteType(route.Type),
		Flags:        nethelpers.RouteFlags(route.Flags),
		Protocol:     nethelpers.RouteProtocol(route.Protocol),
	}

	if dst, ok := netip.AddrFromSlice(attrs.Dst); ok {
		spec.Destination = netip.PrefixFrom(dst.Unmap(), int(route.DstLength))
	}

	if src, ok := netip.AddrFromSlice(attrs.Src); ok {
		spec.Source = src.Unmap()
	}

	if gw, ok := netip.AddrFromSlice(attrs.Gateway); ok {
		spec.Gateway = gw.Unmap()
	}

	if attrs.Metrics != nil {
		spec.MTU = attrs.Metrics.MTU
	}

	return spec
}
