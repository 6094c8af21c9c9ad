package inventory

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/jsimonetti/rtnetlink/v2"
	"github.com/siderolabs/go-pcidb/pkg/pcidb"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// LinksController publishes every network link as a network.LinkStatus
// named after the link, from rtnetlink, with the PCI device behind it from
// sysfs. Links come and go (hot-plug, USB NICs), so it polls.
type LinksController struct {
	Netlink   func() (Netlink, error)
	SysfsRoot string
	Interval  time.Duration

	firstPass
}

// Name implements controller.Controller.
func (ctrl *LinksController) Name() string { return "inventory.LinksController" }

// Inputs implements controller.Controller.
func (ctrl *LinksController) Inputs() []controller.Input { return nil }

// Outputs implements controller.Controller.
func (ctrl *LinksController) Outputs() []controller.Output {
	return []controller.Output{{Type: network.LinkStatusType, Kind: controller.OutputExclusive}}
}

// Run implements controller.Controller.
func (ctrl *LinksController) Run(ctx context.Context, r controller.Runtime, logger *zap.Logger) error {
	p := netlinkPoller{dial: ctrl.Netlink}

	return p.poll(ctx, r, logger, ctrl.Interval, &ctrl.firstPass, func(conn Netlink) (error, error) {
		links, err := conn.Links()
		if err != nil {
			return fmt.Errorf("error listing links: %w", err), nil
		}

		r.StartTrackingOutputs()

		for _, link := range links {
			if link.Attributes == nil || link.Attributes.Name == "" {
				continue
			}

			if err = safe.WriterModify(ctx, r, network.NewLinkStatus(network.NamespaceName, link.Attributes.Name), func(res *network.LinkStatus) error {
				*res.TypedSpec() = ctrl.linkSpec(&link)

				return nil
			}); err != nil {
				return nil, fmt.Errorf("error updating link %s: %w", link.Attributes.Name, err)
			}
		}

		if err = safe.CleanupOutputs[*network.LinkStatus](ctx, r); err != nil {
			return nil, fmt.Errorf("error cleaning up links: %w", err)
		}

		return nil, nil
	})
}

func (ctrl *LinksController) linkSpec(link *rtnetlink.LinkMessage) network.LinkStatusSpec {
	attrs := link.Attributes

	spec := network.LinkStatusSpec{
		AltNames:         attrs.AltNames,
		Index:            link.Index,
		Type:             nethelpers.LinkType(link.Type),
		LinkIndex:        attrs.Type, // rtnetlink decodes IFLA_LINK into Type
		Flags:            nethelpers.LinkFlags(link.Flags),
		HardwareAddr:     nethelpers.HardwareAddr(attrs.Address),
		PermanentAddr:    nethelpers.HardwareAddr(attrs.PermAddress),
		BroadcastAddr:    nethelpers.HardwareAddr(attrs.Broadcast),
		MTU:              attrs.MTU,
		QueueDisc:        attrs.QueueDisc,
		OperationalState: nethelpers.OperationalState(attrs.OperationalState),
		LinkState:        link.Flags&unix.IFF_RUNNING != 0,
	}

	if attrs.Alias != nil {
		spec.Alias = *attrs.Alias
	}

	if attrs.Master != nil {
		spec.MasterIndex = *attrs.Master
	}

	if attrs.Info != nil {
		spec.Kind = attrs.Info.Kind
		spec.SlaveKind = attrs.Info.SlaveKind
	}

	ctrl.fillDevice(&spec, attrs.Name)
	ctrl.fillSpeed(&spec, attrs.Name)

	return spec
}

// fillSpeed adds the negotiated speed and duplex, as the kernel reports them through
// sysfs (what ethtool shows); a link that is down or cannot tell has none.
func (ctrl *LinksController) fillSpeed(spec *network.LinkStatusSpec, name string) {
	dir := filepath.Join(ctrl.SysfsRoot, "class", "net", name)

	if mbit, err := strconv.Atoi(readString(filepath.Join(dir, "speed"))); err == nil && mbit > 0 {
		spec.SpeedMegabits = mbit
	}

	switch readString(filepath.Join(dir, "duplex")) {
	case "full":
		spec.Duplex = nethelpers.Full
	case "half":
		spec.Duplex = nethelpers.Half
	default:
		spec.Duplex = nethelpers.Unknown
	}
}

// fillDevice adds the driver and the PCI device behind a link; virtual links
// have none. virtio-net hangs off a virtioN device whose parent is PCI.
func (ctrl *LinksController) fillDevice(spec *network.LinkStatusSpec, name string) {
	dev, err := filepath.EvalSymlinks(filepath.Join(ctrl.SysfsRoot, "class", "net", name, "device"))
	if err != nil {
		return
	}

	spec.Driver = linkBase(filepath.Join(dev, "driver"))

	for _, candidate := range []string{dev, filepath.Dir(dev)} {
		vendor, err1 := readHexFile(filepath.Join(candidate, "vendor"))
		product, err2 := readHexFile(filepath.Join(candidate, "device"))

		if _, err3 := os.Stat(filepath.Join(candidate, "class")); err1 != nil || err2 != nil || err3 != nil {
			continue
		}

		spec.BusPath = filepath.Base(candidate)
		spec.VendorID = fmt.Sprintf("0x%04x", vendor)
		spec.ProductID = fmt.Sprintf("0x%04x", product)
		spec.PCIID = fmt.Sprintf("%04X:%04X", vendor, product)
		spec.Vendor, _ = pcidb.LookupVendor(pcidb.Vendor(vendor))                           //nolint:gosec // PCI IDs are 16 bits
		spec.Product, _ = pcidb.LookupProduct(pcidb.Vendor(vendor), pcidb.Product(product)) //nolint:gosec // PCI IDs are 16 bits

		return
	}
}
