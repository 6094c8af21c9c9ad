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
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"go.uber.org/zap"
)

// Namespaces the inventory lives in, with Talos' descriptions: block Disks,
// the kernel command line and the platform metadata are in "runtime", as on Talos.
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
		&block.DiscoveredVolume{},
		&network.LinkStatus{},
		&network.AddressStatus{},
		&network.RouteStatus{},
		&network.HostnameStatus{},
		&network.NodeAddress{},
		&runtimeres.KernelCmdline{},
		&runtimeres.PlatformMetadata{},
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

// Collector runs the inventory's controllers on a state and knows which have finished
// their first pass over their source.
type Collector struct {
	st          state.State
	logger      *zap.Logger
	controllers []controller.Controller
	passes      *firstPasses
}

// passingController is an inventory controller: it tells when its first pass is done.
type passingController interface {
	controller.Controller
	onFirstPass(report func())
}

// NewCollector returns a collector of src's inventory into st; start it with Run.
func NewCollector(st state.State, src Sources, logger *zap.Logger) *Collector {
	src = src.withDefaults()
	smbiosInfo := &smbiosLoader{read: src.SMBIOS}

	ctrls := []passingController{
		&SystemInformationController{SMBIOS: smbiosInfo},
		&ProcessorsController{SMBIOS: smbiosInfo},
		&MemoryModulesController{SMBIOS: smbiosInfo, ProcRoot: src.ProcRoot},
		&PCIDevicesController{SysfsRoot: src.SysfsRoot, Interval: src.Interval},
		&DisksController{List: src.Disks, Interval: src.Interval},
		&VolumesController{DevRoot: src.DevRoot},
		&LinksController{Netlink: src.Netlink, SysfsRoot: src.SysfsRoot, Interval: src.Interval},
		&AddressesController{Netlink: src.Netlink, Interval: src.Interval},
		&RoutesController{Netlink: src.Netlink, Interval: src.Interval},
		&HostnameController{Hostname: src.Hostname, ProcRoot: src.ProcRoot, Interval: src.Interval},
		&NodeAddressController{},
		&KernelCmdlineController{ProcRoot: src.ProcRoot},
		&PlatformMetadataController{ProcRoot: src.ProcRoot},
	}

	c := &Collector{st: st, logger: logger}
	names := make([]string, 0, len(ctrls))

	for _, ctrl := range ctrls {
		name := ctrl.Name()
		names = append(names, name)
		c.controllers = append(c.controllers, ctrl)

		ctrl.onFirstPass(func() { c.passes.done(name) })
	}

	// Pending from the start, so that a WaitFirstPass before Run waits too.
	c.passes = newFirstPasses(names)

	return c
}

// Controllers returns the collector's controllers, one per inventory resource type.
func (c *Collector) Controllers() []controller.Controller { return c.controllers }

// Run runs the controllers until ctx is done.
func (c *Collector) Run(ctx context.Context) error {
	rt, err := runtime.NewRuntime(c.st, c.logger)
	if err != nil {
		return fmt.Errorf("error creating controller runtime: %w", err)
	}

	for _, ctrl := range c.controllers {
		if err := rt.RegisterController(ctrl); err != nil {
			return fmt.Errorf("error registering controller %s: %w", ctrl.Name(), err)
		}
	}

	if err := rt.Run(ctx); err != nil {
		return fmt.Errorf("error running inventory controllers: %w", err)
	}

	return nil
}

// WaitFirstPass waits until every controller has read its source once, so that a
// snapshot taken then holds the whole machine (disks included), but no longer than
// timeout or ctx: a source that hangs must not hold the snapshot forever. It returns
// the controllers that had not finished their first pass, sorted; none when all had.
func (c *Collector) WaitFirstPass(ctx context.Context, timeout time.Duration) []string {
	return c.passes.wait(ctx, timeout)
}
