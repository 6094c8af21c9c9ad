package controllers

import (
	"context"
	"fmt"
	"time"

	"github.com/cosi-project/runtime/pkg/controller"
	"go.uber.org/zap"

	"github.com/anvil-metal/anvil/provider/internal/boottrace"
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
	// Trace, when set before Run, marks installs on the machines' boot timelines: every
	// source of "installed" (Talos' event sink, Omni, a person) comes through here.
	Trace *boottrace.Recorder

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

	if err := ctrl.record(ctx, statusReport{
		machineID: machineID,
		apply: func(s *resources.MachineStatusSpec) {
			s.InstalledAllocation = allocationID
			s.InstalledAt = now
			s.InstalledBy = source
		},
		logged: []zap.Field{zap.String("installed", allocationID), zap.String("source", source)},
	}); err != nil {
		return err
	}

	ctrl.Trace.Mark(machineID, boottrace.PhaseInstalled, "", source)

	return nil
}

// RecordWiped records that the machine's wipe of that generation is done, with its report.
func (ctrl *MachineStatusController) RecordWiped(ctx context.Context, machineID string, wipe resources.WipeRecord) error {
	return ctrl.record(ctx, statusReport{
		machineID: machineID,
		apply: func(s *resources.MachineStatusSpec) {
			s.WipedID = wipe.ID
			s.LastWipe = &wipe
			// The machine went through its agent again: its next Talos boot is a new one,
			// whose configuration fetch binds anew.
			s.ConfigFetch = nil
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

// RecordKexecOrdered records that the machine's agent is being ordered to kexec into
// the allocation's Talos: a new handoff, whose deadline runs from now.
func (ctrl *MachineStatusController) RecordKexecOrdered(ctx context.Context, machineID, allocationID string) error {
	now := time.Now()

	return ctrl.record(ctx, statusReport{
		machineID: machineID,
		apply: func(s *resources.MachineStatusSpec) {
			if s.Handoff != nil && s.Handoff.AllocationID == allocationID && s.Handoff.Failure == "" {
				return // ordered again (a reconnect): the first order's deadline stands
			}

			s.Handoff = &resources.HandoffRecord{AllocationID: allocationID, OrderedAt: now}
		},
		logged: []zap.Field{zap.String("kexec_ordered", allocationID)},
	})
}

// RecordKexecLoaded records that the agent loaded the allocation's Talos and jumps.
func (ctrl *MachineStatusController) RecordKexecLoaded(ctx context.Context, machineID, allocationID string) error {
	now := time.Now()

	return ctrl.handoff(ctx, machineID, allocationID, func(h *resources.HandoffRecord) {
		if h.LoadedAt.IsZero() {
			h.LoadedAt = now
		}
	}, zap.String("kexec_loaded", allocationID))
}

// RecordKexecFailed records why the allocation's kexec handoff failed.
func (ctrl *MachineStatusController) RecordKexecFailed(ctx context.Context, machineID, allocationID, why string) error {
	now := time.Now()

	return ctrl.record(ctx, statusReport{
		machineID: machineID,
		apply: func(s *resources.MachineStatusSpec) {
			if s.Handoff == nil || s.Handoff.AllocationID != allocationID {
				s.Handoff = &resources.HandoffRecord{AllocationID: allocationID, OrderedAt: now}
			}

			if s.Handoff.Failure == "" {
				s.Handoff.Failure = why
			}
		},
		logged: []zap.Field{zap.String("kexec_failed", allocationID), zap.String("reason", why)},
	})
}

// RecordTalosSeen records that the allocation's Talos was seen up (it fetched its
// configuration): a kexec handoff of it went through.
func (ctrl *MachineStatusController) RecordTalosSeen(ctx context.Context, machineID, allocationID string) error {
	now := time.Now()

	return ctrl.handoff(ctx, machineID, allocationID, func(h *resources.HandoffRecord) {
		if h.ConfirmedAt.IsZero() {
			h.ConfirmedAt = now
		}
	}, zap.String("talos_seen", allocationID))
}

// UseConfigToken records that the allocation's metadata token, which reached Talos by
// path, was presented from addr,
// and says whether the configuration may be served (MachineStatusSpec.UseConfigToken).
// It returns the record as it stands after this use, and returns once that is stored:
// two fetches racing are decided in order.
func (ctrl *MachineStatusController) UseConfigToken(ctx context.Context, machineID, allocationID, path, addr string) (resources.ConfigFetchRecord, bool, error) {
	now := time.Now()

	var (
		record  resources.ConfigFetchRecord
		allowed bool
	)

	err := ctrl.record(ctx, statusReport{
		machineID: machineID,
		apply: func(s *resources.MachineStatusSpec) {
			allowed = s.UseConfigToken(allocationID, path, addr, now)
			record = *s.ConfigFetch
		},
		logged: []zap.Field{zap.String("config_token_used", allocationID), zap.String("path", path), zap.String("remote", addr)},
	})

	return record, allowed, err
}

// RecordKexecBlockers records why the machine is not to be kexec'd: its hardware is
// known to break across a kexec (the deny list matched its inventory) or its agent said
// it cannot (agentUnavailable, also among the blockers); none: it may be.
func (ctrl *MachineStatusController) RecordKexecBlockers(ctx context.Context, machineID string, blockers []string, agentUnavailable string) error {
	return ctrl.record(ctx, statusReport{
		machineID: machineID,
		apply: func(s *resources.MachineStatusSpec) {
			s.KexecBlockers = blockers
			s.AgentKexecUnavailable = agentUnavailable
		},
		logged: []zap.Field{zap.Strings("kexec_blockers", blockers), zap.String("agent_kexec_unavailable", agentUnavailable)},
	})
}

// handoff changes the machine's handoff record of the allocation, if it has one.
func (ctrl *MachineStatusController) handoff(ctx context.Context, machineID, allocationID string, change func(*resources.HandoffRecord), logged zap.Field) error {
	return ctrl.record(ctx, statusReport{
		machineID: machineID,
		apply: func(s *resources.MachineStatusSpec) {
			if s.Handoff != nil && s.Handoff.AllocationID == allocationID {
				change(s.Handoff)
			}
		},
		logged: []zap.Field{logged},
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
		if err := modifyShared(ctx, r, resources.NewMachineStatus(report.machineID), func(s *resources.MachineStatus) error {
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
