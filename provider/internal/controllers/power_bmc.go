package controllers

import (
	"context"
	"errors"
	"fmt"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/controller/generic"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"

	"github.com/anvil-metal/anvil/provider/internal/power"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// errHeldBack is MayAct's refusal of a BMC call: the machine is looked at again
// shortly, its status as it was.
var errHeldBack = errors.New("BMC calls held back")

// mayAct asks MayAct whether a BMC may be called now.
func (ctrl *PowerController) mayAct() error {
	if ctrl.MayAct == nil {
		return nil
	}

	if err := ctrl.MayAct(); err != nil {
		return fmt.Errorf("%w: %w", errHeldBack, err)
	}

	return nil
}

// read reads the BMC's power state within the per-call timeout, if MayAct allows.
func (ctrl *PowerController) read(ctx context.Context, ep power.Endpoint) (resources.PowerState, error) {
	if err := ctrl.mayAct(); err != nil {
		return resources.PowerUnknown, err
	}

	ctx, cancel := context.WithTimeout(ctx, ctrl.timeout())
	defer cancel()

	c, err := ctrl.Dialers.Dial(ctx, ep)
	if err != nil {
		return resources.PowerUnknown, err
	}
	defer c.Close()

	on, err := c.PowerState(ctx)
	if err != nil {
		return resources.PowerUnknown, fmt.Errorf("error reading the power state: %w", err)
	}

	if on {
		return resources.PowerOn, nil
	}

	return resources.PowerOff, nil
}

// act carries out the action; each BMC call gets the per-call timeout (a PXE override
// and a power-on are two calls). MayAct was asked before the action was recorded: once
// recorded (by a write the fence let through, so while this replica led), it is taken,
// for a takeover finds it recorded and does not take it again.
func (ctrl *PowerController) act(ctx context.Context, ep power.Endpoint, action string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*ctrl.timeout())
	defer cancel()

	c, err := ctrl.Dialers.Dial(ctx, ep)
	if err != nil {
		return err
	}
	defer c.Close()

	switch action {
	case actionOff:
		return c.PowerOff(ctx)
	case actionOn, actionReboot:
		// The provider decides what the machine boots: PXE first, whatever the disk holds.
		if err := c.SetPXEOnce(ctx, ctrl.BootMode); err != nil && !errors.Is(err, power.ErrUnsupported) {
			return fmt.Errorf("error setting the next boot to PXE: %w", err)
		}

		if action == actionOn {
			return c.PowerOn(ctx)
		}

		return c.PowerCycle(ctx)
	}

	return nil
}

func (ctrl *PowerController) password(ctx context.Context, r controller.Reader, id string) (string, error) {
	secret, err := safe.ReaderGetByID[*resources.BMCSecret](ctx, r, id)

	switch {
	case state.IsNotFoundError(err):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("error reading the BMC secret of machine %s: %w", id, err)
	}

	return secret.TypedSpec().Password, nil
}

// endpoint is how the machine's BMC is reached, without its password.
func endpoint(id string, cfg *resources.BMCConfigSpec) power.Endpoint {
	kind := power.Backend(cfg.Kind)
	if kind == "" {
		kind = power.BackendNone
	}

	return power.Endpoint{
		Backend: kind, Address: cfg.Address, Port: int(cfg.Port), Username: cfg.Username,
		Insecure: cfg.Insecure, SystemID: cfg.SystemID, MachineUUID: id,
	}
}

// optionalSpec reads the spec of the machine's resource of type R, nil when there is none.
func optionalSpec[S any, R interface {
	generic.ResourceWithRD
	TypedSpec() *S
}](ctx context.Context, r controller.Reader, id string) (*S, error) {
	res, err := safe.ReaderGetByID[R](ctx, r, id)

	switch {
	case state.IsNotFoundError(err):
		return nil, nil //nolint:nilnil // absent is an answer
	case err != nil:
		var zero R

		return nil, fmt.Errorf("error reading %s of machine %s: %w", zero.ResourceDefinition().Type, id, err)
	}

	return res.TypedSpec(), nil
}
