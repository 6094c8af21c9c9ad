package lifecycle

import (
	"context"
	"fmt"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/state"

	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// Getter reads one resource: a state, or a controller's runtime.
type Getter interface {
	Get(ctx context.Context, ptr resource.Pointer, opts ...state.GetOption) (resource.Resource, error)
}

// Read gathers what the rules read of one machine from the state; a resource that does
// not exist is left nil.
func Read(ctx context.Context, r Getter, id resource.ID) (Machine, error) {
	m := Machine{ID: id}

	machine, err := get[*resources.Machine](ctx, r, resources.NewMachine(id))
	if err != nil {
		return m, err
	}

	intent, err := get[*resources.MachineIntent](ctx, r, resources.NewMachineIntent(id))
	if err != nil {
		return m, err
	}

	status, err := get[*resources.MachineStatus](ctx, r, resources.NewMachineStatus(id))
	if err != nil {
		return m, err
	}

	bmc, err := get[*resources.BMCConfig](ctx, r, resources.NewBMCConfig(id))
	if err != nil {
		return m, err
	}

	if machine != nil {
		m.Machine = machine.TypedSpec()
	}

	if intent != nil {
		m.Intent = intent.TypedSpec()
	}

	if status != nil {
		m.Status = status.TypedSpec()
	}

	if bmc != nil {
		m.BMC = bmc.TypedSpec()
	}

	return m, nil
}

// get reads the resource like empty, nil when it does not exist.
func get[T resource.Resource](ctx context.Context, r Getter, empty T) (T, error) {
	var zero T

	md := empty.Metadata()

	res, err := r.Get(ctx, md)

	switch {
	case state.IsNotFoundError(err):
		return zero, nil
	case err != nil:
		return zero, fmt.Errorf("error reading %s of machine %s: %w", md.Type(), md.ID(), err)
	}

	typed, ok := res.(T)
	if !ok {
		return zero, fmt.Errorf("%s of machine %s is a %T", md.Type(), md.ID(), res)
	}

	return typed, nil
}
