package inventory

import (
	"context"
	"fmt"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/resources/hardware"
	"go.uber.org/zap"
)

// SystemInformationController publishes SMBIOS type 1 (system) as the
// singleton hardware.SystemInformation.
type SystemInformationController struct {
	SMBIOS *smbiosLoader

	firstPass
}

// Name implements controller.Controller.
func (ctrl *SystemInformationController) Name() string {
	return "inventory.SystemInformationController"
}

// Inputs implements controller.Controller.
func (ctrl *SystemInformationController) Inputs() []controller.Input { return nil }

// Outputs implements controller.Controller.
func (ctrl *SystemInformationController) Outputs() []controller.Output {
	return []controller.Output{{Type: hardware.SystemInformationType, Kind: controller.OutputExclusive}}
}

// Run implements controller.Controller. SMBIOS does not change, so it runs
// once on the first event and then waits for the end.
func (ctrl *SystemInformationController) Run(ctx context.Context, r controller.Runtime, logger *zap.Logger) error {
	pace := ctrl.pacer(nil)

	for pace.next(ctx, r) {
		info, err := ctrl.SMBIOS.load(logger)
		if err != nil {
			// Without SMBIOS (no firmware tables, corrupt dump) the machine is
			// reported without its identity rather than not at all.
			logger.Warn("no SMBIOS system information", zap.Error(err))

			continue
		}

		r.StartTrackingOutputs()

		in := info.SystemInformation

		if err = safe.WriterModify(ctx, r, hardware.NewSystemInformation(hardware.SystemInformationID), func(res *hardware.SystemInformation) error {
			*res.TypedSpec() = hardware.SystemInformationSpec{
				Manufacturer: in.Manufacturer,
				ProductName:  in.ProductName,
				Version:      in.Version,
				BIOSVersion:  info.BIOSInformation.Version,
				SerialNumber: in.SerialNumber,
				UUID:         in.UUID,
				WakeUpType:   in.WakeUpType.String(),
				SKUNumber:    in.SKUNumber,
			}

			return nil
		}); err != nil {
			return fmt.Errorf("error updating system information: %w", err)
		}

		if err = safe.CleanupOutputs[*hardware.SystemInformation](ctx, r); err != nil {
			return fmt.Errorf("error cleaning up system information: %w", err)
		}
	}

	return nil
}
