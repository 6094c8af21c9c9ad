package controllers

import (
	"context"
	"fmt"
	"time"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/image-factory/pkg/schematic"
	"go.uber.org/zap"

	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// SchematicRegistrar is the part of the Image Factory client the controller uses.
type SchematicRegistrar interface {
	SchematicCreate(ctx context.Context, sc schematic.Schematic) (string, *schematic.Schematic, error)
}

// Registration retries back off from the first to the last delay.
const (
	registerTimeout    = 30 * time.Second
	registerRetryFirst = 5 * time.Second
	registerRetryMax   = 5 * time.Minute
)

// SchematicController registers with the Image Factory every schematic an allocation
// boots, so the factory knows it by the time the machine's boot asks for its assets:
// it produces Schematic from MachineIntent.
type SchematicController struct {
	Factory SchematicRegistrar
	// SchematicFor builds an allocation's schematic, as the allocation did.
	SchematicFor func(extensions, kernelArgs []string) (schematic.Schematic, error)
}

// Name implements controller.Controller.
func (ctrl *SchematicController) Name() string { return "SchematicController" }

// Inputs implements controller.Controller.
func (ctrl *SchematicController) Inputs() []controller.Input {
	return []controller.Input{{Namespace: resources.NamespaceName, Type: resources.MachineIntentType, Kind: controller.InputWeak}}
}

// Outputs implements controller.Controller.
func (ctrl *SchematicController) Outputs() []controller.Output {
	return []controller.Output{{Type: resources.SchematicType, Kind: controller.OutputExclusive}}
}

// Run implements controller.Controller.
func (ctrl *SchematicController) Run(ctx context.Context, r controller.Runtime, logger *zap.Logger) error {
	retry := time.NewTimer(0)
	defer retry.Stop()

	<-retry.C

	backoff := registerRetryFirst

	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.EventCh():
		case <-retry.C:
		}

		failed, err := ctrl.reconcile(ctx, r, logger)
		if err != nil {
			return err
		}

		if failed {
			retry.Reset(backoff)
			backoff = min(2*backoff, registerRetryMax)
		} else {
			backoff = registerRetryFirst
		}
	}
}

// reconcile registers what is not registered yet and reports whether any failed.
func (ctrl *SchematicController) reconcile(ctx context.Context, r controller.Runtime, logger *zap.Logger) (bool, error) {
	intents, err := safe.ReaderListAll[*resources.MachineIntent](ctx, r)
	if err != nil {
		return false, fmt.Errorf("error listing machine intents: %w", err)
	}

	wanted := map[resource.ID]*resources.Allocation{}

	for in := range intents.All() {
		if a := in.TypedSpec().Allocation; a != nil && a.SchematicID != "" {
			wanted[a.SchematicID] = a
		}
	}

	failed := false

	r.StartTrackingOutputs()

	for id, alloc := range wanted {
		current, err := safe.ReaderGetByID[*resources.Schematic](ctx, r, id)
		if err != nil && !state.IsNotFoundError(err) {
			return false, fmt.Errorf("error reading schematic %s: %w", id, err)
		}

		sc, err := ctrl.SchematicFor(alloc.Extensions, alloc.KernelArgs)
		if err != nil {
			// Not yet buildable (Omni's join config unknown): the allocation's schematic
			// is registered on a later pass.
			failed = true

			logger.Warn("error building a schematic", zap.String("schematic", id), zap.Error(err))

			continue
		}

		spec := resources.SchematicSpec{
			Extensions: sc.Customization.SystemExtensions.OfficialExtensions,
			KernelArgs: sc.Customization.ExtraKernelArgs,
		}

		switch {
		case current != nil && current.TypedSpec().Registered:
			spec = current.TypedSpec().DeepCopy()
		default:
			if regErr := RegisterSchematic(ctx, ctrl.Factory, id, sc); regErr != nil {
				failed = true
				spec.LastError = regErr.Error()
				logger.Warn("error registering schematic with the Image Factory", zap.String("schematic", id), zap.Error(regErr))
			} else {
				spec.Registered = true
				spec.RegisteredAt = time.Now()
				logger.Info("schematic registered with the Image Factory", zap.String("schematic", id))
			}
		}

		if err = safe.WriterModify(ctx, r, resources.NewSchematic(id), func(s *resources.Schematic) error {
			*s.TypedSpec() = spec

			return nil
		}); err != nil {
			return false, fmt.Errorf("error writing schematic %s: %w", id, err)
		}
	}

	// Schematics no allocation boots any more go.
	if err = r.CleanupOutputs(ctx, resources.NewSchematic("").Metadata()); err != nil {
		return false, fmt.Errorf("error cleaning up schematics: %w", err)
	}

	return failed, nil
}

// RegisterSchematic registers sc with the factory (registering again is harmless) and
// checks that the factory knows it as id, the ID its allocation computed. The controller
// registers each allocation's in the background; a boot that finds the factory does not
// know it yet registers it in the foreground with this.
func RegisterSchematic(ctx context.Context, factory SchematicRegistrar, id resource.ID, sc schematic.Schematic) error {
	ctx, cancel := context.WithTimeout(ctx, registerTimeout)
	defer cancel()

	got, _, err := factory.SchematicCreate(ctx, sc)
	if err != nil {
		return err
	}

	// The allocation stored the ID computed when it was made; a different one means the
	// schematic's content changed since (the provider's address, say).
	if got != id {
		return fmt.Errorf("the factory says the schematic is %s, not %s: its content changed since the allocation; deallocate and allocate again", got, id)
	}

	return nil
}
