package inventory

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/go-pcidb/pkg/pcidb"
	"github.com/siderolabs/talos/pkg/machinery/resources/hardware"
	"go.uber.org/zap"
)

// PCIDevicesController publishes each device under sysfs bus/pci/devices as
// a hardware.PCIDevice named by its address, with names from go-pcidb.
type PCIDevicesController struct {
	SysfsRoot string
	Interval  time.Duration

	firstPass
}

// Name implements controller.Controller.
func (ctrl *PCIDevicesController) Name() string { return "inventory.PCIDevicesController" }

// Inputs implements controller.Controller.
func (ctrl *PCIDevicesController) Inputs() []controller.Input { return nil }

// Outputs implements controller.Controller.
func (ctrl *PCIDevicesController) Outputs() []controller.Output {
	return []controller.Output{{Type: hardware.PCIDeviceType, Kind: controller.OutputExclusive}}
}

// Run implements controller.Controller; sysfs is read again every Interval
// so hot-plugged devices and late driver binds show.
func (ctrl *PCIDevicesController) Run(ctx context.Context, r controller.Runtime, logger *zap.Logger) error {
	ticker := time.NewTicker(ctrl.Interval)
	defer ticker.Stop()

	dir := filepath.Join(ctrl.SysfsRoot, "bus", "pci", "devices")

	pace := ctrl.pacer(ticker.C)

	for pace.next(ctx, r) {
		entries, err := os.ReadDir(dir)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			logger.Warn("error scanning PCI devices", zap.String("dir", dir), zap.Error(err))

			continue
		}

		r.StartTrackingOutputs()

		for _, entry := range entries {
			spec, err := readPCIDevice(filepath.Join(dir, entry.Name()))
			if err != nil {
				// A device removed mid-read, or a sysfs without the file.
				logger.Debug("skipping PCI device", zap.String("device", entry.Name()), zap.Error(err))

				continue
			}

			if err = safe.WriterModify(ctx, r, hardware.NewPCIDeviceInfo(entry.Name()), func(res *hardware.PCIDevice) error {
				*res.TypedSpec() = spec

				return nil
			}); err != nil {
				return fmt.Errorf("error updating PCI device %s: %w", entry.Name(), err)
			}
		}

		if err = safe.CleanupOutputs[*hardware.PCIDevice](ctx, r); err != nil {
			return fmt.Errorf("error cleaning up PCI devices: %w", err)
		}
	}

	return nil
}

// readPCIDevice reads one device's IDs as Talos does; class, vendor and
// device are required, the driver is not (unbound devices, root ports).
func readPCIDevice(path string) (hardware.PCIDeviceSpec, error) {
	class, err := readHexFile(filepath.Join(path, "class"))
	if err != nil {
		return hardware.PCIDeviceSpec{}, fmt.Errorf("error reading class: %w", err)
	}

	vendor, err := readHexFile(filepath.Join(path, "vendor"))
	if err != nil {
		return hardware.PCIDeviceSpec{}, fmt.Errorf("error reading vendor: %w", err)
	}

	product, err := readHexFile(filepath.Join(path, "device"))
	if err != nil {
		return hardware.PCIDeviceSpec{}, fmt.Errorf("error reading device: %w", err)
	}

	classID := pcidb.Class((class >> 16) & 0xff)
	subclassID := pcidb.Subclass((class >> 8) & 0xff)
	vendorID := pcidb.Vendor(vendor)    //nolint:gosec // PCI IDs are 16 bits
	productID := pcidb.Product(product) //nolint:gosec // PCI IDs are 16 bits

	spec := hardware.PCIDeviceSpec{
		ClassID:    fmt.Sprintf("0x%02x", classID),
		SubclassID: fmt.Sprintf("0x%02x", subclassID),
		VendorID:   fmt.Sprintf("0x%04x", vendorID),
		ProductID:  fmt.Sprintf("0x%04x", productID),
		Driver:     linkBase(filepath.Join(path, "driver")),
	}

	spec.Class, _ = pcidb.LookupClass(classID)
	spec.Subclass, _ = pcidb.LookupSubclass(classID, subclassID)
	spec.Vendor, _ = pcidb.LookupVendor(vendorID)
	spec.Product, _ = pcidb.LookupProduct(vendorID, productID)

	return spec, nil
}

// readHexFile parses a sysfs number such as "0x010802".
func readHexFile(path string) (uint64, error) {
	contents, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}

	v, err := strconv.ParseUint(strings.TrimSpace(string(contents)), 0, 64)
	if err != nil {
		return 0, fmt.Errorf("error parsing %s: %w", path, err)
	}

	return v, nil
}

// readString reads a sysfs attribute; a missing one is "".
func readString(path string) string {
	contents, err := os.ReadFile(path)
	if err != nil {
		return ""
	}

	return strings.TrimSpace(string(contents))
}

// linkBase is the last element of a symlink's target ("" if there is none),
// which is how sysfs names a device's driver or bus address.
func linkBase(path string) string {
	target, err := os.Readlink(path)
	if err != nil {
		return ""
	}

	return filepath.Base(target)
}
