package inventory

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/go-smbios/smbios"
	"github.com/siderolabs/talos/pkg/machinery/resources/hardware"
	"go.uber.org/zap"
)

// memoryModuleUnknown names the one module reported from /proc/meminfo when
// SMBIOS lists none (many VMs), as Talos does.
const memoryModuleUnknown = "UNKNOWN"

// MemoryModulesController publishes each SMBIOS type 17 (memory device) as a
// hardware.MemoryModule named after its locator ("DIMM 0" → "DIMM-0").
type MemoryModulesController struct {
	SMBIOS   *smbiosLoader
	ProcRoot string

	firstPass
}

// Name implements controller.Controller.
func (ctrl *MemoryModulesController) Name() string { return "inventory.MemoryModulesController" }

// Inputs implements controller.Controller.
func (ctrl *MemoryModulesController) Inputs() []controller.Input { return nil }

// Outputs implements controller.Controller.
func (ctrl *MemoryModulesController) Outputs() []controller.Output {
	return []controller.Output{{Type: hardware.MemoryModuleType, Kind: controller.OutputExclusive}}
}

// Run implements controller.Controller; SMBIOS is read once.
func (ctrl *MemoryModulesController) Run(ctx context.Context, r controller.Runtime, logger *zap.Logger) error {
	pace := ctrl.pacer(nil)

	for pace.next(ctx, r) {
		var devices []smbios.MemoryDevice

		info, err := ctrl.SMBIOS.load(logger)
		if err != nil {
			logger.Warn("no SMBIOS memory information, falling back to meminfo", zap.Error(err))
		} else {
			devices = info.MemoryDevices
		}

		r.StartTrackingOutputs()

		ids := idSet{}

		for i, m := range devices {
			id := ids.unique(m.DeviceLocator, "DIMM", i)

			if err = safe.WriterModify(ctx, r, hardware.NewMemoryModuleInfo(id), func(res *hardware.MemoryModule) error {
				*res.TypedSpec() = memoryModuleSpec(&m)

				return nil
			}); err != nil {
				return fmt.Errorf("error updating memory module %s: %w", id, err)
			}
		}

		if len(devices) == 0 {
			if err = ctrl.fromMeminfo(ctx, r, logger); err != nil {
				return err
			}
		}

		if err = safe.CleanupOutputs[*hardware.MemoryModule](ctx, r); err != nil {
			return fmt.Errorf("error cleaning up memory modules: %w", err)
		}
	}

	return nil
}

func (ctrl *MemoryModulesController) fromMeminfo(ctx context.Context, r controller.Runtime, logger *zap.Logger) error {
	totalKiB, err := memTotalKiB(filepath.Join(ctrl.ProcRoot, "meminfo"))
	if err != nil {
		logger.Warn("no memory size from meminfo either", zap.Error(err))

		return nil
	}

	if err = safe.WriterModify(ctx, r, hardware.NewMemoryModuleInfo(memoryModuleUnknown), func(res *hardware.MemoryModule) error {
		*res.TypedSpec() = hardware.MemoryModuleSpec{
			Size:         uint32(totalKiB / 1024), //nolint:gosec // MiB: 4 PiB fit
			Manufacturer: memoryModuleUnknown,
		}

		return nil
	}); err != nil {
		return fmt.Errorf("error updating memory module from meminfo: %w", err)
	}

	return nil
}

// memoryModuleSpec maps a device as Talos does (an empty slot is an empty
// spec), reading sizes given in KiB (bit 15) correctly.
func memoryModuleSpec(in *smbios.MemoryDevice) hardware.MemoryModuleSpec {
	if in.Size == 0 || in.Size == 0xFFFF {
		return hardware.MemoryModuleSpec{}
	}

	size := uint32(in.Size.Megabytes()) //nolint:gosec // SMBIOS sizes are 15 bits
	if in.Size == 0x7FFF {
		size = uint32(in.ExtendedSize)
	}

	return hardware.MemoryModuleSpec{
		Size:          size,
		DeviceLocator: in.DeviceLocator,
		BankLocator:   in.BankLocator,
		Speed:         uint32(in.Speed),
		Manufacturer:  in.Manufacturer,
		SerialNumber:  in.SerialNumber,
		AssetTag:      in.AssetTag,
		ProductName:   in.PartNumber,
	}
}

// memTotalKiB reads MemTotal from a meminfo file.
func memTotalKiB(path string) (uint64, error) {
	contents, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("error reading meminfo: %w", err)
	}

	sc := bufio.NewScanner(bytes.NewReader(contents))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			v, err := strconv.ParseUint(fields[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("error parsing MemTotal %q: %w", fields[1], err)
			}

			return v, nil
		}
	}

	return 0, fmt.Errorf("no MemTotal in %s", path)
}

// idSet makes Talos-style IDs (spaces to dashes) unique: firmware repeats
// locators, and an empty one is not a valid ID.
type idSet map[string]struct{}

func (s idSet) unique(name, fallback string, index int) string {
	id := strings.ReplaceAll(strings.TrimSpace(name), " ", "-")
	if id == "" {
		id = fmt.Sprintf("%s-%d", fallback, index)
	}

	if _, dup := s[id]; dup {
		id = fmt.Sprintf("%s-%d", id, index)
	}

	s[id] = struct{}{}

	return id
}
