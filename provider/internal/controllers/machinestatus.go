package controllers

import (
	"context"
	"fmt"
	"time"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"go.uber.org/zap"

	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// statusReport is a fact about a machine to record on its status.
type statusReport struct {
	machineID string
	apply     func(*resources.MachineStatusSpec)
	logged    []zap.Field
}

// MachineStatusController produces MachineStatus from what machines report.
type MachineStatusController struct {
	reports *inbox[statusReport]
}

// NewMachineStatusController returns the controller.
func NewMachineStatusController() *MachineStatusController {
	return &MachineStatusController{reports: newInbox[statusReport]()}
}

// RecordInstalled records that the machine was installed under the allocation
// (source: "event-sink" when Talos said so, "manual"), and returns once that is stored,
// so an acknowledged report is never lost.
func (ctrl *MachineStatusController) RecordInstalled(ctx context.Context, machineID, allocationID, source string) error {
	now := time.Now()

	return ctrl.record(ctx, statusReport{
		machineID: machineID,
		apply: func(s *resources.MachineStatusSpec) {
			s.InstalledAllocation = allocationID
			s.InstalledAt = now
			s.InstalledBy = source
		},
		logged: []zap.Field{zap.String("installed", allocationID), zap.String("source", source)},
	})
}

// RecordWiped records that the machine's wipe of that generation is done, with its report.
func (ctrl *MachineStatusController) RecordWiped(ctx context.Context, machineID string, wipe resources.WipeRecord) error {
	return ctrl.record(ctx, statusReport{
		machineID: machineID,
		apply: func(s *resources.MachineStatusSpec) {
			s.WipedID = wipe.ID
			s.LastWipe = &wipe
		},
		logged: []zap.Field{zap.String("wiped", wipe.ID), zap.Int("disks", len(wipe.Disks))},
	})
}

// RecordBMCOrder records that the machine's agent answered BMC provisioning order; failure
// is why it failed ("" when done).
func (ctrl *MachineStatusController) RecordBMCOrder(ctx context.Context, machineID, order, failure string) error {
	return ctrl.record(ctx, statusReport{
		machineID: machineID,
		apply: func(s *resources.MachineStatusSpec) {
			s.BMCOrder, s.BMCError = order, failure
		},
		logged: []zap.Field{zap.String("bmc_order", order), zap.String("bmc_error", failure)},
	})
}

func (ctrl *MachineStatusController) record(ctx context.Context, report statusReport) error {
	return ctrl.reports.send(ctx, report)
}

// Name implements controller.Controller.
func (ctrl *MachineStatusController) Name() string { return "MachineStatusController" }

// Inputs implements controller.Controller.
func (ctrl *MachineStatusController) Inputs() []controller.Input { return nil }

// Outputs implements controller.Controller.
func (ctrl *MachineStatusController) Outputs() []controller.Output {
	return []controller.Output{{Type: resources.MachineStatusType, Kind: controller.OutputExclusive}}
}

// Run implements controller.Controller.
func (ctrl *MachineStatusController) Run(ctx context.Context, r controller.Runtime, logger *zap.Logger) error {
	ctrl.reports.serve(ctx, r.EventCh(), func(report statusReport) error {
		if err := safe.WriterModify(ctx, r, resources.NewMachineStatus(report.machineID), func(s *resources.MachineStatus) error {
			report.apply(s.TypedSpec())

			return nil
		}); err != nil {
			return fmt.Errorf("error recording the status of machine %s: %w", report.machineID, err)
		}

		logger.Info("machine status", append([]zap.Field{zap.String("machine", report.machineID)}, report.logged...)...)

		return nil
	})

	return nil
}
