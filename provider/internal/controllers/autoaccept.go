package controllers

import (
	"context"
	"fmt"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"go.uber.org/zap"

	"github.com/anvil-metal/anvil/provider/internal/lifecycle"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// Acceptor accepts a pending machine by the same rule a person's Accept follows (a wipe
// owed), and never one that is not pending any more; transitions.Service implements it.
type Acceptor interface {
	AcceptPending(ctx context.Context, id, reason string) (bool, error)
}

// AutoAcceptController accepts pending machines whose effective labels match the
// --auto-accept selector, once their inventory is in, so that selectors on derived
// labels are decided on the hardware and not on its absence. It produces nothing
// itself: MachineIntent is written only through the transitions, which serialize it
// with what people do and re-check that the machine is still pending.
//
// A queue controller: one machine per reconcile, when its labels or intent change, so
// a burst of new machines costs one look at each rather than a look at all per event.
type AutoAcceptController struct {
	Acceptor Acceptor
	// Selector picks the machines; one without terms matches every machine ("all").
	Selector resource.LabelQuery
	// Description is the flag's value, for the log.
	Description string
}

// Name implements controller.QController.
func (ctrl *AutoAcceptController) Name() string { return "AutoAcceptController" }

// Settings implements controller.QController.
func (ctrl *AutoAcceptController) Settings() controller.QSettings {
	return controller.QSettings{
		Inputs: []controller.Input{
			{Namespace: resources.NamespaceName, Type: resources.MachineLabelsType, Kind: controller.InputQPrimary},
			{Namespace: resources.NamespaceName, Type: resources.MachineIntentType, Kind: controller.InputQMapped},
		},
	}
}

// MapInput implements controller.QController: an intent maps to its machine's labels.
func (ctrl *AutoAcceptController) MapInput(_ context.Context, _ *zap.Logger, _ controller.QRuntime, ptr controller.ReducedResourceMetadata) ([]resource.Pointer, error) {
	return []resource.Pointer{resources.NewMachineLabels(ptr.ID()).Metadata()}, nil
}

// Reconcile implements controller.QController: the machine is accepted if it is pending,
// its inventory is in and its labels match.
func (ctrl *AutoAcceptController) Reconcile(ctx context.Context, logger *zap.Logger, r controller.QRuntime, ptr resource.Pointer) error {
	id := ptr.ID()

	ml, err := safe.ReaderGetByID[*resources.MachineLabels](ctx, r, id)

	switch {
	case state.IsNotFoundError(err):
		return nil
	case err != nil:
		return fmt.Errorf("error reading the labels of machine %s: %w", id, err)
	}

	if !ml.TypedSpec().FromInventory || !ctrl.Selector.Matches(*ml.Metadata().Labels()) {
		return nil
	}

	intent, err := safe.ReaderGetByID[*resources.MachineIntent](ctx, r, id)
	if err != nil && !state.IsNotFoundError(err) {
		return fmt.Errorf("error reading the intent of machine %s: %w", id, err)
	}

	// The transition checks again under its lock.
	m := lifecycle.Machine{ID: id}
	if intent != nil {
		m.Intent = intent.TypedSpec()
	}

	if m.Acceptance() != resources.AcceptancePending {
		return nil
	}

	accepted, err := ctrl.Acceptor.AcceptPending(ctx, id, "auto-accept "+ctrl.Description)
	if err != nil {
		return fmt.Errorf("error auto-accepting machine %s: %w", id, err)
	}

	if accepted {
		logger.Info("auto-accepted machine", zap.String("machine", id), zap.String("auto_accept", ctrl.Description),
			zap.Any("labels", ml.Metadata().Labels().Raw()))
	}

	return nil
}
