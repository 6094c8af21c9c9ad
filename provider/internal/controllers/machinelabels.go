package controllers

import (
	"context"
	"fmt"
	"maps"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"go.uber.org/zap"

	anvilstate "github.com/anvil-metal/anvil/provider/internal/state"
)

// MachineLabelsController produces MachineLabels: each known machine's effective labels
// (static from --machine-labels, derived from its boot and inventory, the user's from its
// MachineIntent) as the metadata labels of one resource, so selectors have one place to
// look and Machine keeps its one writer.
type MachineLabelsController struct {
	// Static labels are set on every machine (--machine-labels); validated by the wiring.
	Static map[string]string
}

// Name implements controller.Controller.
func (ctrl *MachineLabelsController) Name() string { return "MachineLabelsController" }

// Inputs implements controller.Controller.
func (ctrl *MachineLabelsController) Inputs() []controller.Input {
	return []controller.Input{
		{Namespace: anvilstate.NamespaceName, Type: anvilstate.MachineType, Kind: controller.InputWeak},
		{Namespace: anvilstate.NamespaceName, Type: anvilstate.MachineInventoryType, Kind: controller.InputWeak},
		{Namespace: anvilstate.NamespaceName, Type: anvilstate.MachineIntentType, Kind: controller.InputWeak},
	}
}

// Outputs implements controller.Controller.
func (ctrl *MachineLabelsController) Outputs() []controller.Output {
	return []controller.Output{{Type: anvilstate.MachineLabelsType, Kind: controller.OutputExclusive}}
}

// Run implements controller.Controller.
func (ctrl *MachineLabelsController) Run(ctx context.Context, r controller.Runtime, _ *zap.Logger) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.EventCh():
		}

		if err := ctrl.reconcile(ctx, r); err != nil {
			return err
		}
	}
}

func (ctrl *MachineLabelsController) reconcile(ctx context.Context, r controller.Runtime) error {
	machines, err := safe.ReaderListAll[*anvilstate.Machine](ctx, r)
	if err != nil {
		return fmt.Errorf("error listing machines: %w", err)
	}

	inventories, err := safe.ReaderListAll[*anvilstate.MachineInventory](ctx, r)
	if err != nil {
		return fmt.Errorf("error listing machine inventories: %w", err)
	}

	intents, err := safe.ReaderListAll[*anvilstate.MachineIntent](ctx, r)
	if err != nil {
		return fmt.Errorf("error listing machine intents: %w", err)
	}

	inventoryByID := make(map[string]*anvilstate.MachineInventorySpec, inventories.Len())
	for inv := range inventories.All() {
		inventoryByID[inv.Metadata().ID()] = inv.TypedSpec()
	}

	userByID := make(map[string]map[string]string, intents.Len())
	for in := range intents.All() {
		userByID[in.Metadata().ID()] = in.TypedSpec().Labels
	}

	r.StartTrackingOutputs()

	for m := range machines.All() {
		id := m.Metadata().ID()
		inv := inventoryByID[id]

		spec := anvilstate.MachineLabelsSpec{
			Static:        nonEmpty(ctrl.Static),
			Derived:       nonEmpty(DeriveLabels(m.TypedSpec(), inv)),
			User:          nonEmpty(userByID[id]),
			FromInventory: inv != nil,
		}

		if err = safe.WriterModify(ctx, r, anvilstate.NewMachineLabels(id), func(ml *anvilstate.MachineLabels) error {
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
	}

	if err = r.CleanupOutputs(ctx, anvilstate.NewMachineLabels("").Metadata()); err != nil {
		return fmt.Errorf("error removing the labels of machines gone: %w", err)
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
