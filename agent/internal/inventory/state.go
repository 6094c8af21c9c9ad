package inventory

import (
	"context"
	"fmt"
	"time"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/controller/runtime"
	"github.com/cosi-project/runtime/pkg/resource/meta"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/cosi-project/runtime/pkg/state/impl/inmem"
	"github.com/cosi-project/runtime/pkg/state/impl/namespaced"
	"github.com/cosi-project/runtime/pkg/state/registry"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/siderolabs/talos/pkg/machinery/resources/hardware"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"go.uber.org/zap"
)

// Namespaces the inventory lives in, with Talos' descriptions: block Disks
// are in "runtime", as on Talos.
var namespaces = []struct {
	name        string
	description string
}{
	{hardware.NamespaceName, "Hardware resources."},
	{block.NamespaceName, "Talos runtime."},
	{network.NamespaceName, "Networking resources."},
}

// Definitions are the inventory's resource types, which the state lists in
// meta and a maintenance API serves: exactly these, so a client that lists
// definitions first asks only for what exists.
func Definitions() []meta.ResourceWithRD {
	return []meta.ResourceWithRD{
		&hardware.SystemInformation{},
		&hardware.Processor{},
		&hardware.MemoryModule{},
		&hardware.PCIDevice{},
		&block.Disk{},
		&network.LinkStatus{},
		&network.AddressStatus{},
		&network.RouteStatus{},
		&network.HostnameStatus{},
	}
}

// NewState returns an in-memory state with the namespaces and resource
// definitions registered.
func NewState(ctx context.Context) (state.State, error) {
	st := state.WrapCore(namespaced.NewState(inmem.Build))

	if err := Register(ctx, st); err != nil {
		return nil, err
	}

	return st, nil
}

// Register creates the meta namespace, the inventory's namespaces and the
// definitions of meta's own types and of Definitions in st.
func Register(ctx context.Context, st state.State) error {
	nsRegistry := registry.NewNamespaceRegistry(st)

	if err := nsRegistry.RegisterDefault(ctx); err != nil {
		return fmt.Errorf("error registering meta namespace: %w", err)
	}

	for _, ns := range namespaces {
		if err := nsRegistry.Register(ctx, ns.name, ns.description); err != nil {
			return fmt.Errorf("error registering namespace %s: %w", ns.name, err)
		}
	}

	rdRegistry := registry.NewResourceRegistry(st)

	if err := rdRegistry.RegisterDefault(ctx); err != nil {
		return fmt.Errorf("error registering meta resource definitions: %w", err)
	}

	for _, r := range Definitions() {
		if err := rdRegistry.Register(ctx, r); err != nil {
			return fmt.Errorf("error registering resource definition %s: %w", r.ResourceDefinition().Type, err)
		}
	}

	return nil
}

// Controllers returns one controller per inventory resource type, reading src.
func Controllers(src Sources) []controller.Controller {
	src = src.withDefaults()
	smbiosInfo := &smbiosLoader{read: src.SMBIOS}

	return []controller.Controller{
		&SystemInformationController{SMBIOS: smbiosInfo},
		&ProcessorsController{SMBIOS: smbiosInfo},
		&MemoryModulesController{SMBIOS: smbiosInfo, ProcRoot: src.ProcRoot},
		&PCIDevicesController{SysfsRoot: src.SysfsRoot, Interval: src.Interval},
		&DisksController{List: src.Disks, Interval: src.Interval},
		&LinksController{Netlink: src.Netlink, SysfsRoot: src.SysfsRoot, Interval: src.Interval},
		&AddressesController{Netlink: src.Netlink, Interval: src.Interval},
		&RoutesController{Netlink: src.Netlink, Interval: src.Interval},
		&HostnameController{Hostname: src.Hostname, ProcRoot: src.ProcRoot, Interval: src.Interval},
	}
}

// Run runs the inventory controllers on st until ctx is done.
func Run(ctx context.Context, st state.State, src Sources, logger *zap.Logger) error {
	rt, err := runtime.NewRuntime(st, logger)
	if err != nil {
		return fmt.Errorf("error creating controller runtime: %w", err)
	}

	for _, ctrl := range Controllers(src) {
		if err := rt.RegisterController(ctrl); err != nil {
			return fmt.Errorf("error registering controller %s: %w", ctrl.Name(), err)
		}
	}

	if err := rt.Run(ctx); err != nil {
		return fmt.Errorf("error running inventory controllers: %w", err)
	}

	return nil
}

// waitTick waits for the next reason to read the source again: the first
// run event, a tick, or the end. It reports false when ctx is done.
func waitTick(ctx context.Context, r controller.Runtime, tick <-chan time.Time) bool {
	select {
	case <-ctx.Done():
		return false
	case <-r.EventCh():
	case <-tick:
	}

	return true
}
