package inventory

import (
	"context"
	"fmt"
	"slices"

	"github.com/cosi-project/runtime/pkg/controller/generic"
	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/siderolabs/talos/pkg/machinery/resources/hardware"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
)

// Inventory is every inventory resource in a state at one moment, for
// sending to the provider.
type Inventory struct {
	System        *hardware.SystemInformation // nil without SMBIOS
	Processors    []*hardware.Processor
	MemoryModules []*hardware.MemoryModule
	PCIDevices    []*hardware.PCIDevice
	Disks         []*block.Disk
	Volumes       []*block.DiscoveredVolume // md and LVM members
	Links         []*network.LinkStatus
	Addresses     []*network.AddressStatus
	Routes        []*network.RouteStatus
	Hostname      *network.HostnameStatus // nil until read
}

// Resources returns the inventory as plain resources, in a stable order.
func (inv *Inventory) Resources() []resource.Resource {
	var out []resource.Resource

	if inv.System != nil {
		out = append(out, inv.System)
	}

	out = appendAll(out, inv.Processors)
	out = appendAll(out, inv.MemoryModules)
	out = appendAll(out, inv.PCIDevices)
	out = appendAll(out, inv.Disks)
	out = appendAll(out, inv.Volumes)
	out = appendAll(out, inv.Links)
	out = appendAll(out, inv.Addresses)
	out = appendAll(out, inv.Routes)

	if inv.Hostname != nil {
		out = append(out, inv.Hostname)
	}

	return out
}

func appendAll[T resource.Resource](out []resource.Resource, items []T) []resource.Resource {
	for _, item := range items {
		out = append(out, item)
	}

	return out
}

// Snapshot lists all inventory resources in st.
func Snapshot(ctx context.Context, st state.State) (*Inventory, error) {
	var (
		inv Inventory
		err error
	)

	if inv.System, err = getOptional[*hardware.SystemInformation](ctx, st, hardware.NewSystemInformation(hardware.SystemInformationID).Metadata()); err != nil {
		return nil, err
	}

	if inv.Hostname, err = getOptional[*network.HostnameStatus](ctx, st, network.NewHostnameStatus(network.NamespaceName, network.HostnameID).Metadata()); err != nil {
		return nil, err
	}

	if inv.Processors, err = listAll[*hardware.Processor](ctx, st); err != nil {
		return nil, err
	}

	if inv.MemoryModules, err = listAll[*hardware.MemoryModule](ctx, st); err != nil {
		return nil, err
	}

	if inv.PCIDevices, err = listAll[*hardware.PCIDevice](ctx, st); err != nil {
		return nil, err
	}

	if inv.Disks, err = listAll[*block.Disk](ctx, st); err != nil {
		return nil, err
	}

	if inv.Volumes, err = listAll[*block.DiscoveredVolume](ctx, st); err != nil {
		return nil, err
	}

	if inv.Links, err = listAll[*network.LinkStatus](ctx, st); err != nil {
		return nil, err
	}

	if inv.Addresses, err = listAll[*network.AddressStatus](ctx, st); err != nil {
		return nil, err
	}

	if inv.Routes, err = listAll[*network.RouteStatus](ctx, st); err != nil {
		return nil, err
	}

	return &inv, nil
}

// listAll lists a type in its definition's default namespace.
func listAll[T generic.ResourceWithRD](ctx context.Context, st state.State) ([]T, error) {
	list, err := safe.StateListAll[T](ctx, st)
	if err != nil {
		var zero T

		return nil, fmt.Errorf("error listing %s: %w", zero.ResourceDefinition().Type, err)
	}

	return slices.Collect(list.All()), nil
}

func getOptional[T resource.Resource](ctx context.Context, st state.State, md *resource.Metadata) (T, error) {
	var zero T

	res, err := safe.StateGet[T](ctx, st, md)
	if err != nil {
		if state.IsNotFoundError(err) {
			return zero, nil
		}

		return zero, fmt.Errorf("error getting %s: %w", md.Type(), err)
	}

	return res, nil
}
