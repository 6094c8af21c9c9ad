package controllers

import (
	"context"
	"fmt"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"go.uber.org/zap"

	anvilstate "github.com/anvil-metal/anvil/provider/internal/state"
)

type inventoryReport struct {
	machineID string
	spec      anvilstate.MachineInventorySpec
	done      chan error
}

// MachineInventoryController produces MachineInventory from what agents report.
type MachineInventoryController struct {
	reports chan inventoryReport
}

// NewMachineInventoryController returns the controller.
func NewMachineInventoryController() *MachineInventoryController {
	return &MachineInventoryController{reports: make(chan inventoryReport)}
}

// RecordInventory stores the machine's inventory and returns once it is stored.
func (ctrl *MachineInventoryController) RecordInventory(ctx context.Context, machineID string, spec anvilstate.MachineInventorySpec) error {
	report := inventoryReport{machineID: machineID, spec: spec, done: make(chan error, 1)}

	select {
	case ctrl.reports <- report:
	case <-ctx.Done():
		return ctx.Err()
	}

	select {
	case err := <-report.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Name implements controller.Controller.
func (ctrl *MachineInventoryController) Name() string { return "MachineInventoryController" }

// Inputs implements controller.Controller.
func (ctrl *MachineInventoryController) Inputs() []controller.Input { return nil }

// Outputs implements controller.Controller.
func (ctrl *MachineInventoryController) Outputs() []controller.Output {
	return []controller.Output{{Type: anvilstate.MachineInventoryType, Kind: controller.OutputExclusive}}
}

// Run implements controller.Controller.
func (ctrl *MachineInventoryController) Run(ctx context.Context, r controller.Runtime, logger *zap.Logger) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.EventCh():
		case report := <-ctrl.reports:
			err := safe.WriterModify(ctx, r, anvilstate.NewMachineInventory(report.machineID), func(inv *anvilstate.MachineInventory) error {
				*inv.TypedSpec() = report.spec

				return nil
			})
			if err != nil {
				err = fmt.Errorf("error recording the inventory of machine %s: %w", report.machineID, err)
			} else {
				logger.Info("machine inventory", zap.String("machine", report.machineID),
					zap.String("manufacturer", report.spec.System.Manufacturer), zap.String("product", report.spec.System.Product),
					zap.Int("cpus", len(report.spec.CPUs)), zap.Uint64("memory_mib", report.spec.MemoryMiB),
					zap.Int("disks", len(report.spec.Disks)), zap.Int("nics", len(report.spec.NICs)))
			}

			report.done <- err
		}
	}
}
