package controllers

import (
	"context"
	"fmt"
	"maps"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"go.uber.org/zap"

	"github.com/anvil-metal/anvil/internal/disksel"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// MachineLabelsController produces MachineLabels: each known machine's effective labels
// (static from --machine-labels, derived from its boot and inventory, the user's from its
// MachineIntent) as the metadata labels of one resource, so selectors have one place to
// look and Machine keeps its one writer.
//
// It is a queue controller, one machine per reconcile: a machine's boot stamps change its
// Machine often, and a fleet of thousands must not have every machine's labels
// recomputed for each of them.
type MachineLabelsController struct {
	// Static labels are set on every machine (--machine-labels); validated by the wiring.
	Static map[string]string
	// InstallDisk is the provider's default install disk selector (--install-disk): each
	// machine gets LabelInstallDisk, whether it resolves there. Zero: no such label.
	InstallDisk disksel.Selector
}

// Name implements controller.QController.
func (ctrl *MachineLabelsController) Name() string { return "MachineLabelsController" }

// Settings implements controller.QController: Machine is the primary input; a machine's
// inventory and intent map to it by ID.
func (ctrl *MachineLabelsController) Settings() controller.QSettings {
	return controller.QSettings{
		Inputs: []controller.Input{
			{Namespace: resources.NamespaceName, Type: resources.MachineType, Kind: controller.InputQPrimary},
			{Namespace: resources.NamespaceName, Type: resources.MachineInventoryType, Kind: controller.InputQMapped},
			{Namespace: resources.NamespaceName, Type: resources.MachineIntentType, Kind: controller.InputQMapped},
		},
		Outputs: []controller.Output{{Type: resources.MachineLabelsType, Kind: controller.OutputExclusive}},
	}
}

// MapInput implements controller.QController: an inventory or intent is the machine's of
// the same ID.
func (ctrl *MachineLabelsController) MapInput(_ context.Context, _ *zap.Logger, _ controller.QRuntime, ptr controller.ReducedResourceMetadata) ([]resource.Pointer, error) {
	return []resource.Pointer{resources.NewMachine(ptr.ID()).Metadata()}, nil
}

// Reconcile implements controller.QController: the labels of the machine ptr names, or
// none when the machine is gone.
func (ctrl *MachineLabelsController) Reconcile(ctx context.Context, _ *zap.Logger, r controller.QRuntime, ptr resource.Pointer) error {
	id := ptr.ID()

	m, err := safe.ReaderGetByID[*resources.Machine](ctx, r, id)
	if err != nil {
		if !state.IsNotFoundError(err) {
			return fmt.Errorf("error reading machine %s: %w", id, err)
		}

		if err = r.Destroy(ctx, resources.NewMachineLabels(id).Metadata()); err != nil && !state.IsNotFoundError(err) {
			return fmt.Errorf("error removing the labels of machine %s: %w", id, err)
		}

		return nil
	}

	inv, err := safe.ReaderGetByID[*resources.MachineInventory](ctx, r, id)
	if err != nil && !state.IsNotFoundError(err) {
		return fmt.Errorf("error reading the inventory of machine %s: %w", id, err)
	}

	intent, err := safe.ReaderGetByID[*resources.MachineIntent](ctx, r, id)
	if err != nil && !state.IsNotFoundError(err) {
		return fmt.Errorf("error reading the intent of machine %s: %w", id, err)
	}

	var (
		invSpec *resources.MachineInventorySpec
		user    map[string]string
	)

	if inv != nil {
		invSpec = inv.TypedSpec()
	}

	if intent != nil {
		user = intent.TypedSpec().Labels
	}

	derived := DeriveLabels(m.TypedSpec(), invSpec)
	if v := InstallDiskLabel(ctrl.InstallDisk, invSpec); v != "" {
		derived[LabelInstallDisk] = v
	}

	spec := resources.MachineLabelsSpec{
		Static:        nonEmpty(ctrl.Static),
		Derived:       nonEmpty(derived),
		User:          nonEmpty(user),
		FromInventory: invSpec != nil,
	}

	// An unchanged spec and labels leave the resource as it is (no write, no event).
	if err = safe.WriterModify(ctx, r, resources.NewMachineLabels(id), func(ml *resources.MachineLabels) error {
		*ml.TypedSpec() = spec.DeepCopy()

		effective := spec.Effective()

		for _, k := range ml.Metadata().Labels().Keys() {
			if _, ok := effective[k]; !ok {
				ml.Metadata().Labels().Delete(k)
			}
		}

		for k, v := range effective {
			ml.Metadata().Labels().Set(k, v)
		}

		return nil
	}); err != nil {
		return fmt.Errorf("error writing the labels of machine %s: %w", id, err)
	}

	return nil
}

// nonEmpty keeps empty maps out of the spec, so an unchanged machine compares equal and
// is not rewritten.
func nonEmpty(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}

	return maps.Clone(m)
}
