package controllers

import (
	"context"
	"fmt"
	"maps"
	"time"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"go.uber.org/zap"

	"github.com/anvil-metal/anvil/provider/internal/lifecycle"
	"github.com/anvil-metal/anvil/provider/internal/resources"
	"github.com/anvil-metal/anvil/provider/internal/transitions"
)

// OmniMachineStatusController produces, in Omni mode, OmniMachineStatus for each machine
// Omni has (an OmniMachine): what the Omni adapter reports back as its
// infra.MachineStatus — power, ready to use, installed, the reboot and power-off
// requests carried out, the node unique token a wipe voided, and the labels.
//
// A queue controller: one machine per reconcile, when anything it reads of the machine
// changes.
type OmniMachineStatusController struct {
	Policy lifecycle.Policy
	// Sync, when set, hears each status stored (the sync-lag metric).
	Sync OmniSync
}

// Name implements controller.QController.
func (ctrl *OmniMachineStatusController) Name() string { return "OmniMachineStatusController" }

// Settings implements controller.QController.
func (ctrl *OmniMachineStatusController) Settings() controller.QSettings {
	mapped := func(t resource.Type) controller.Input {
		return controller.Input{Namespace: resources.NamespaceName, Type: t, Kind: controller.InputQMapped}
	}

	return controller.QSettings{
		Inputs: []controller.Input{
			{Namespace: resources.NamespaceName, Type: resources.OmniMachineType, Kind: controller.InputQPrimary},
			mapped(resources.MachineType), mapped(resources.MachineIntentType), mapped(resources.MachineStatusType),
			mapped(resources.PowerStatusType), mapped(resources.MachineLabelsType), mapped(resources.BMCConfigType),
		},
		Outputs: []controller.Output{{Type: resources.OmniMachineStatusType, Kind: controller.OutputExclusive}},
	}
}

// MapInput implements controller.QController: every input maps to Omni's view of its
// machine.
func (ctrl *OmniMachineStatusController) MapInput(_ context.Context, _ *zap.Logger, _ controller.QRuntime, ptr controller.ReducedResourceMetadata) ([]resource.Pointer, error) {
	return []resource.Pointer{resources.NewOmniMachine(ptr.ID()).Metadata()}, nil
}

// Reconcile implements controller.QController.
func (ctrl *OmniMachineStatusController) Reconcile(ctx context.Context, _ *zap.Logger, r controller.QRuntime, ptr resource.Pointer) error {
	id := ptr.ID()
	started := time.Now()

	om, err := safe.ReaderGetByID[*resources.OmniMachine](ctx, r, id)

	switch {
	case state.IsNotFoundError(err) || (err == nil && om.TypedSpec().Gone):
		// Omni does not have the machine: nothing to report.
		if err = r.Destroy(ctx, resources.NewOmniMachineStatus(id).Metadata()); err != nil && !state.IsNotFoundError(err) {
			return fmt.Errorf("error removing the Omni status of machine %s: %w", id, err)
		}

		return nil
	case err != nil:
		return fmt.Errorf("error reading Omni's view of machine %s: %w", id, err)
	}

	m, err := lifecycle.Read(ctx, r, id)
	if err != nil {
		return fmt.Errorf("error reading machine %s: %w", id, err)
	}

	ps, err := safe.ReaderGetByID[*resources.PowerStatus](ctx, r, id)
	if err != nil && !state.IsNotFoundError(err) {
		return fmt.Errorf("error reading the power status of machine %s: %w", id, err)
	}

	ml, err := safe.ReaderGetByID[*resources.MachineLabels](ctx, r, id)
	if err != nil && !state.IsNotFoundError(err) {
		return fmt.Errorf("error reading the labels of machine %s: %w", id, err)
	}

	var (
		power  *resources.PowerStatusSpec
		labels map[string]string
	)

	if ps != nil {
		power = ps.TypedSpec()
	}

	if ml != nil {
		labels = ml.Metadata().Labels().Raw()
	}

	spec := OmniStatus(*om.TypedSpec(), m, power, labels, ctrl.Policy)

	if err = safe.WriterModify(ctx, r, resources.NewOmniMachineStatus(id), func(s *resources.OmniMachineStatus) error {
		*s.TypedSpec() = spec

		return nil
	}); err != nil {
		return fmt.Errorf("error writing the Omni status of machine %s: %w", id, err)
	}

	if ctrl.Sync != nil {
		ctrl.Sync.Reported(id, started)
	}

	return nil
}

// OmniStatus is what Anvil reports to Omni of a machine: om is Omni's view of it, m what
// the lifecycle rules read, power its PowerStatus (nil: none yet), labels its effective
// labels.
func OmniStatus(om resources.OmniMachineSpec, m lifecycle.Machine, power *resources.PowerStatusSpec, labels map[string]string, p lifecycle.Policy) resources.OmniMachineStatusSpec {
	s := resources.OmniMachineStatusSpec{
		Power:     resources.PowerUnknown,
		Installed: m.Installed(),
		// Omni applies a cluster's config only to a machine ready to use, installed or
		// not; one held by a local allocation is not Omni's to use at all.
		ReadyToUse: m.Accepted() && !m.WipeOwed() && !m.BMCPending(p) && !transitions.LocalAllocation(m.Allocation()),
		Labels:     maps.Clone(labels),
	}

	if m.Status != nil && m.Status.LastWipe != nil {
		s.WipedNodeUniqueToken = m.Status.LastWipe.OmniNodeUniqueToken
	}

	if power == nil {
		return s
	}

	if power.State == resources.PowerOn || power.State == resources.PowerOff {
		s.Power = power.State
	}

	// The reboot request carried out last, when it carried one of Omni's.
	if id, ok := transitions.OmniRebootRequest(power.RebootID); ok {
		s.LastRebootID, s.LastRebootAt = id, power.LastActionAt
	}

	// A power-off request is carried out once the machine is seen off.
	if om.PowerOffRequestID != "" && power.State == resources.PowerOff {
		s.LastPowerOffID = om.PowerOffRequestID
	}

	return s
}
