package controllers

import (
	"context"
	"fmt"
	"reflect"
	"time"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"go.uber.org/zap"

	"github.com/anvil-metal/anvil/provider/internal/resources"
)

type inventoryReport struct {
	machineID string
	spec      resources.MachineInventorySpec
}

// inventoryRefresh is how old a stored inventory may grow before the same one reported
// again is written anyway, to move its ReportedAt.
const inventoryRefresh = time.Hour

// unchangedInventory says whether a report repeats the stored inventory (but for when it
// was reported, recently): every agent reconnecting reports its inventory again, and
// writing each (a disk sync apiece) after a provider restart with 10,000 agents kept the
// store busy for minutes ahead of the wipe reports behind them (bench fleet).
func unchangedInventory(stored, report *resources.MachineInventorySpec) bool {
	if report.ReportedAt.Sub(stored.ReportedAt) > inventoryRefresh {
		return false
	}

	a, b := *stored, *report
	a.ReportedAt, b.ReportedAt = time.Time{}, time.Time{}

	return reflect.DeepEqual(a, b)
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
		if cur, err := safe.ReaderGetByID[*resources.MachineInventory](ctx, r, report.machineID); err == nil &&
			unchangedInventory(cur.TypedSpec(), &report.spec) {
			return nil
		}

		err := modifyShared(ctx, r, resources.NewMachineInventory(report.machineID), func(inv *resources.MachineInventory) error {
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
