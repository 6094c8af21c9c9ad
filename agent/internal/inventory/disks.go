package inventory

import (
	"context"
	"fmt"
	"time"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"go.uber.org/zap"
)

// Disk is one whole disk as a Disks source reports it: the ID is the kernel
// name ("vda", "nvme0n1", "sr0").
type Disk struct {
	ID   string
	Spec block.DiskSpec
}

// DisksController publishes whole disks as block.Disk in the runtime
// namespace, as Talos' block.DisksController does, reading again every
// Interval for hot-plug.
type DisksController struct {
	List     func(ctx context.Context, logger *zap.Logger) ([]Disk, error)
	Interval time.Duration

	firstPass
}

// Name implements controller.Controller.
func (ctrl *DisksController) Name() string { return "inventory.DisksController" }

// Inputs implements controller.Controller.
func (ctrl *DisksController) Inputs() []controller.Input { return nil }

// Outputs implements controller.Controller.
func (ctrl *DisksController) Outputs() []controller.Output {
	return []controller.Output{{Type: block.DiskType, Kind: controller.OutputExclusive}}
}

// Run implements controller.Controller.
func (ctrl *DisksController) Run(ctx context.Context, r controller.Runtime, logger *zap.Logger) error {
	ticker := time.NewTicker(ctrl.Interval)
	defer ticker.Stop()

	pace := ctrl.pacer(ticker.C)

	for pace.next(ctx, r) {
		disks, err := ctrl.List(ctx, logger)
		if err != nil {
			// Keep the last known disks rather than report none.
			logger.Warn("error listing disks", zap.Error(err))

			continue
		}

		r.StartTrackingOutputs()

		for _, disk := range disks {
			if err = safe.WriterModify(ctx, r, block.NewDisk(block.NamespaceName, disk.ID), func(res *block.Disk) error {
				*res.TypedSpec() = disk.Spec

				return nil
			}); err != nil {
				return fmt.Errorf("error updating disk %s: %w", disk.ID, err)
			}
		}

		if err = safe.CleanupOutputs[*block.Disk](ctx, r); err != nil {
			return fmt.Errorf("error cleaning up disks: %w", err)
		}
	}

	return nil
}
