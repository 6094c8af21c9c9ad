package controllers

import (
	"context"
	"fmt"
	"reflect"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"go.uber.org/zap"

	"github.com/anvil-metal/anvil/provider/internal/lifecycle"
	"github.com/anvil-metal/anvil/provider/internal/resources"
	"github.com/anvil-metal/anvil/provider/internal/transitions"
)

// OmniApplier makes Omni's decisions a machine's intent; the owner's view of
// transitions.Service implements it.
type OmniApplier interface {
	ApplyOmni(ctx context.Context, id string, o resources.OmniMachineSpec) (*resources.MachineIntentSpec, error)
}

// OmniIntentController carries out, in Omni mode, what Omni decides of each machine:
// its OmniMachine (Omni's infra.Machine, as the adapter reported it) becomes its
// MachineIntent through the transitions, which serialize it with what the local control
// may still change (labels, wipe mode) and are MachineIntent's only writer. It produces
// nothing itself.
//
// A queue controller: one machine per reconcile, when Omni's view of it changes or when
// the provider first sees the machine (Omni may know a machine before this provider's
// state does, after the state was lost).
type OmniIntentController struct {
	Applier OmniApplier
	// Recorder records the install Omni counted (MachineStatusController).
	Recorder transitions.InstallRecorder
	// Sync, when set, hears each OmniMachine applied (the sync-lag metric).
	Sync OmniSync
}

// Name implements controller.QController.
func (ctrl *OmniIntentController) Name() string { return "OmniIntentController" }

// Settings implements controller.QController.
func (ctrl *OmniIntentController) Settings() controller.QSettings {
	return controller.QSettings{
		Inputs: []controller.Input{
			{Namespace: resources.NamespaceName, Type: resources.OmniMachineType, Kind: controller.InputQPrimary},
			{Namespace: resources.NamespaceName, Type: resources.MachineType, Kind: controller.InputQMapped},
			{Namespace: resources.NamespaceName, Type: resources.MachineStatusType, Kind: controller.InputQMapped},
			// A local allocation released (see transitions' adoption rules) hands the
			// machine to Omni's decisions.
			{Namespace: resources.NamespaceName, Type: resources.MachineIntentType, Kind: controller.InputQMapped},
		},
	}
}

// MapInput implements controller.QController: a machine maps to Omni's view of it.
func (ctrl *OmniIntentController) MapInput(_ context.Context, _ *zap.Logger, _ controller.QRuntime, ptr controller.ReducedResourceMetadata) ([]resource.Pointer, error) {
	return []resource.Pointer{resources.NewOmniMachine(ptr.ID()).Metadata()}, nil
}

// Reconcile implements controller.QController.
func (ctrl *OmniIntentController) Reconcile(ctx context.Context, logger *zap.Logger, r controller.QRuntime, ptr resource.Pointer) error {
	id := ptr.ID()

	om, err := safe.ReaderGetByID[*resources.OmniMachine](ctx, r, id)

	switch {
	case state.IsNotFoundError(err):
		// Omni never had the machine: it keeps its intent (the adoption rules).
		return nil
	case err != nil:
		return fmt.Errorf("error reading Omni's view of machine %s: %w", id, err)
	}

	var before *resources.MachineIntentSpec

	if ctrl.Sync != nil {
		// To tell whether the intent changed (the status then follows it).
		if before, err = optionalSpec[resources.MachineIntentSpec, *resources.MachineIntent](ctx, r, id); err != nil {
			return err
		}
	}

	intent, err := ctrl.Applier.ApplyOmni(ctx, id, *om.TypedSpec())

	switch transitions.CodeOf(err) {
	case transitions.CodeNotFound:
		// Not seen by this provider yet: its first boot maps it here again.
		return nil
	case transitions.CodeRefused:
		// Held by a local allocation (the adoption rules): Omni decides once it is
		// released. Or accepted by Omni without a TPM identity under --require-tpm: it
		// stays pending until its agent proves one (its Machine changing maps it here).
		logger.Info("Omni's decisions wait", zap.String("machine", id), zap.Error(err))

		return nil
	case transitions.CodeInvalid:
		// The adapter API refuses what is invalid: this is a bug, not a retry.
		logger.Error("Omni's decisions for a machine are invalid", zap.String("machine", id), zap.Error(err))

		return nil
	}

	if err != nil {
		return fmt.Errorf("error applying Omni's decisions to machine %s: %w", id, err)
	}

	logger.Debug("Omni's decisions applied", zap.String("machine", id), zap.String("acceptance", string(intent.Acceptance)))

	if ctrl.Sync != nil {
		ctrl.Sync.Applied(id, before == nil || !reflect.DeepEqual(*before, *intent))
	}

	return ctrl.recordInstall(ctx, r, id, om.TypedSpec(), intent)
}

// recordInstall records, once, that the allocation is installed when Omni counted an
// install since the last wipe (lifecycle.OmniInstalled).
func (ctrl *OmniIntentController) recordInstall(ctx context.Context, r controller.QRuntime, id string, om *resources.OmniMachineSpec, intent *resources.MachineIntentSpec) error {
	if intent.Allocation == nil || ctrl.Recorder == nil {
		return nil
	}

	status, err := safe.ReaderGetByID[*resources.MachineStatus](ctx, r, id)
	if err != nil && !state.IsNotFoundError(err) {
		return fmt.Errorf("error reading the status of machine %s: %w", id, err)
	}

	var spec *resources.MachineStatusSpec
	if status != nil {
		spec = status.TypedSpec()
	}

	if !lifecycle.OmniInstalled(*om, spec) || (spec != nil && spec.InstalledAllocation == intent.Allocation.ID) {
		return nil
	}

	if err := ctrl.Recorder.RecordInstalled(ctx, id, intent.Allocation.ID, InstalledByOmni); err != nil {
		return fmt.Errorf("error recording the install of machine %s: %w", id, err)
	}

	return nil
}

// InstalledByOmni is the source of an install Omni counted.
const InstalledByOmni = "omni"
