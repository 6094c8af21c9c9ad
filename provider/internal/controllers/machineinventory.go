package controllers

import (
	"context"
	"fmt"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"go.uber.org/zap"

	"github.com/anvil-metal/anvil/provider/internal/resources"
)

type inventoryReport struct {
	machineID string
	spec      resources.MachineInventorySpec
}

// MachineInventoryController produces MachineInventory from what agents report.
type MachineInventoryController struct {
	reports *inbox[inventoryReport]
}

// NewMachineInventoryController returns the controller.
func NewMachineInventoryController() *MachineInventoryController {
	return &MachineInventoryController{reports: newInbox[inventoryReport]()}
}

// RecordInventory stores the machine's inventory and returns once it is stored.
func (ctrl *MachineInventoryController) RecordInventory(ctx context.Context, machineID string, spec resources.MachineInventorySpec) error {
	return ctrl.reports.send(ctx, inventoryReport{machineID: machineID, spec: spec})
}

// Name implements controller.Controller.
func (ctrl *MachineInventoryController) Name() string { return "MachineInventoryController" }

// Inputs implements controller.Controller.
func (ctrl *MachineInventoryController) Inputs() []controller.Input { return nil }

// Outputs implements controller.Controller.
func (ctrl *MachineInventoryController) Outputs() []controller.Output {
	return []controller.Output{{Type: resources.MachineInventoryType, Kind: controller.OutputExclusive}}
}

// Run implements controller.Controller.
func (ctrl *MachineInventoryController) Run(ctx context.Context, r controller.Runtime, logger *zap.Logger) error {
	ctrl.reports.serve(ctx, r.EventCh(), func(report inventoryReport) error {
		err := safe.WriterModify(ctx, r, resources.NewMachineInventory(report.machineID), func(inv *resources.MachineInventory) error {
			*inv.TypedSpec() = report.spec

			return nil
		})
		if err != nil {
			return fmt.Errorf("error recording the inventory of machine %s: %w", report.machineID, err)
		}

		logger.Info("machine inventory", zap.String("machine", report.machineID),
			zap.String("manufacturer", report.spec.System.Manufacturer), zap.String("product", report.spec.System.Product),
			zap.Int("cpus", len(report.spec.CPUs)), zap.Uint64("memory_mib", report.spec.MemoryMiB),
			zap.Int("disks", len(report.spec.Disks)), zap.Int("nics", len(report.spec.NICs)))

		return nil
	})

	return nil
}
