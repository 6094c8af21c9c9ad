package inventory

import (
	"context"
	"fmt"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/go-smbios/smbios"
	"github.com/siderolabs/talos/pkg/machinery/resources/hardware"
	"go.uber.org/zap"
)

// ProcessorsController publishes each SMBIOS type 4 (processor socket) as a
// hardware.Processor named after its socket, as Talos does ("CPU 1" → "CPU-1").
type ProcessorsController struct {
	SMBIOS *smbiosLoader

	firstPass
}

// Name implements controller.Controller.
func (ctrl *ProcessorsController) Name() string { return "inventory.ProcessorsController" }

// Inputs implements controller.Controller.
func (ctrl *ProcessorsController) Inputs() []controller.Input { return nil }

// Outputs implements controller.Controller.
func (ctrl *ProcessorsController) Outputs() []controller.Output {
	return []controller.Output{{Type: hardware.ProcessorType, Kind: controller.OutputExclusive}}
}

// Run implements controller.Controller; SMBIOS is read once.
func (ctrl *ProcessorsController) Run(ctx context.Context, r controller.Runtime, logger *zap.Logger) error {
	pace := ctrl.pacer(nil)

	for pace.next(ctx, r) {
		info, err := ctrl.SMBIOS.load(logger)
		if err != nil {
			logger.Warn("no SMBIOS processor information", zap.Error(err))

			continue
		}

		r.StartTrackingOutputs()

		ids := idSet{}

		for i, p := range info.ProcessorInformation {
			id := ids.unique(p.SocketDesignation, "CPU", i)

			if err = safe.WriterModify(ctx, r, hardware.NewProcessorInfo(id), func(res *hardware.Processor) error {
				*res.TypedSpec() = processorSpec(&p)

				return nil
			}); err != nil {
				return fmt.Errorf("error updating processor %s: %w", id, err)
			}
		}

		if err = safe.CleanupOutputs[*hardware.Processor](ctx, r); err != nil {
			return fmt.Errorf("error cleaning up processors: %w", err)
		}
	}

	return nil
}

// processorSpec maps a socket as Talos does: an empty socket is an empty spec.
func processorSpec(in *smbios.ProcessorInformation) hardware.ProcessorSpec {
	if !in.Status.SocketPopulated() {
		return hardware.ProcessorSpec{}
	}

	return hardware.ProcessorSpec{
		Socket:       in.SocketDesignation,
		Manufacturer: in.ProcessorManufacturer,
		ProductName:  in.ProcessorVersion,
		MaxSpeed:     uint32(in.MaxSpeed),
		BootSpeed:    uint32(in.CurrentSpeed),
		Status:       uint32(in.Status), //nolint:gosec // an SMBIOS byte
		SerialNumber: in.SerialNumber,
		AssetTag:     in.AssetTag,
		PartNumber:   in.PartNumber,
		CoreCount:    uint32(in.CoreCount),
		CoreEnabled:  uint32(in.CoreEnabled),
		ThreadCount:  uint32(in.ThreadCount),
	}
}
