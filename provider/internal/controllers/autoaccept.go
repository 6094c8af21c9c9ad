package controllers

import (
	"context"
	"errors"
	"fmt"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"go.uber.org/zap"

	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// Acceptor accepts a pending machine by the same rule a person's Accept follows (a wipe
// owed), and never one that is not pending any more; control.Transitions implements it.
type Acceptor interface {
	AcceptPending(ctx context.Context, id, reason string) (bool, error)
}

// AutoAcceptController accepts pending machines whose effective labels match the
// --auto-accept selector, once their inventory is in, so that selectors on derived
// labels are decided on the hardware and not on its absence. It produces nothing
// itself: MachineIntent is written only through the transitions, which serialize it
// with what people do and re-check that the machine is still pending.
type AutoAcceptController struct {
	Acceptor Acceptor
	// Selector picks the machines; one without terms matches every machine ("all").
	Selector resource.LabelQuery
	// Description is the flag's value, for the log.
	Description string
}

// Name implements controller.Controller.
func (ctrl *AutoAcceptController) Name() string { return "AutoAcceptController" }

// Inputs implements controller.Controller.
func (ctrl *AutoAcceptController) Inputs() []controller.Input {
	return []controller.Input{
		{Namespace: resources.NamespaceName, Type: resources.MachineLabelsType, Kind: controller.InputWeak},
		{Namespace: resources.NamespaceName, Type: resources.MachineIntentType, Kind: controller.InputWeak},
	}
}

// Outputs implements controller.Controller: none, see the type's comment.
func (ctrl *AutoAcceptController) Outputs() []controller.Output { return nil }

// Run implements controller.Controller.
func (ctrl *AutoAcceptController) Run(ctx context.Context, r controller.Runtime, logger *zap.Logger) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.EventCh():
		}

		if err := ctrl.reconcile(ctx, r, logger); err != nil {
			return err
		}
	}
}

// reconcile accepts every matching pending machine; a failure is returned after the
// others had their turn, and the runtime restarts the controller to try again.
func (ctrl *AutoAcceptController) reconcile(ctx context.Context, r controller.Runtime, logger *zap.Logger) error {
	labels, err := safe.ReaderListAll[*resources.MachineLabels](ctx, r)
	if err != nil {
		return fmt.Errorf("error listing machine labels: %w", err)
	}

	intents, err := safe.ReaderListAll[*resources.MachineIntent](ctx, r)
	if err != nil {
		return fmt.Errorf("error listing machine intents: %w", err)
	}

	acceptance := make(map[string]resources.Acceptance, intents.Len())
	for in := range intents.All() {
		acceptance[in.Metadata().ID()] = in.TypedSpec().Acceptance
	}

	var errs []error

	for ml := range labels.All() {
		id := ml.Metadata().ID()

		// No intent is pending too.
		if a, ok := acceptance[id]; ok && a != resources.AcceptancePending {
			continue
		}

		if !ml.TypedSpec().FromInventory || !ctrl.Selector.Matches(*ml.Metadata().Labels()) {
			continue
		}

		accepted, err := ctrl.Acceptor.AcceptPending(ctx, id, "auto-accept "+ctrl.Description)
		if err != nil {
			errs = append(errs, fmt.Errorf("error auto-accepting machine %s: %w", id, err))

			continue
		}

		if accepted {
			logger.Info("auto-accepted machine", zap.String("machine", id), zap.String("auto_accept", ctrl.Description),
				zap.Any("labels", ml.Metadata().Labels().Raw()))
		}
	}

	return errors.Join(errs...)
}
