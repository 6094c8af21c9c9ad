package controllers

import (
	"context"
	"fmt"
	"time"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"go.uber.org/zap"

	anvilstate "github.com/anvil-metal/anvil/provider/internal/state"
)

// InstallReport says a machine was installed under an allocation.
type InstallReport struct {
	MachineID    string
	AllocationID string
	// Source is where the fact came from: "event-sink" (Talos said so) or "manual".
	Source string
	At     time.Time

	done chan error
}

// MachineStatusController produces MachineStatus from what machines report.
type MachineStatusController struct {
	reports chan InstallReport
}

// NewMachineStatusController returns the controller.
func NewMachineStatusController() *MachineStatusController {
	return &MachineStatusController{reports: make(chan InstallReport)}
}

// RecordInstalled records that the machine was installed under the allocation, and
// returns once that is stored, so an acknowledged report is never lost.
func (ctrl *MachineStatusController) RecordInstalled(ctx context.Context, machineID, allocationID, source string) error {
	report := InstallReport{MachineID: machineID, AllocationID: allocationID, Source: source, At: time.Now(), done: make(chan error, 1)}

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
func (ctrl *MachineStatusController) Name() string { return "MachineStatusController" }

// Inputs implements controller.Controller.
func (ctrl *MachineStatusController) Inputs() []controller.Input { return nil }

// Outputs implements controller.Controller.
func (ctrl *MachineStatusController) Outputs() []controller.Output {
	return []controller.Output{{Type: anvilstate.MachineStatusType, Kind: controller.OutputExclusive}}
}

// Run implements controller.Controller.
func (ctrl *MachineStatusController) Run(ctx context.Context, r controller.Runtime, logger *zap.Logger) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.EventCh():
		case report := <-ctrl.reports:
			err := safe.WriterModify(ctx, r, anvilstate.NewMachineStatus(report.MachineID), func(s *anvilstate.MachineStatus) error {
				s.TypedSpec().InstalledAllocation = report.AllocationID
				s.TypedSpec().InstalledAt = report.At
				s.TypedSpec().InstalledBy = report.Source

				return nil
			})
			if err != nil {
				err = fmt.Errorf("error recording machine %s installed: %w", report.MachineID, err)
			} else {
				logger.Info("machine installed", zap.String("machine", report.MachineID),
					zap.String("allocation", report.AllocationID), zap.String("source", report.Source))
			}

			report.done <- err
		}
	}
}
