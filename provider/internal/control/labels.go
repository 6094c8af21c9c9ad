package control

import (
	"context"
	"fmt"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	controlv1 "github.com/anvil-metal/anvil/api/control/v1"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// maxUserLabels bounds a machine's own labels, so one request cannot bloat its intent.
const maxUserLabels = 64

// SetLabels sets and removes the user's own labels on a machine, in any state. The
// effective labels (MachineLabels) follow from the MachineLabelsController.
func (t *Transitions) SetLabels(ctx context.Context, req *controlv1.SetLabelsRequest) (*controlv1.SetLabelsResponse, error) {
	if err := validateLabelChange(req.GetSet(), req.GetRemove()); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}

	in, err := t.transition(ctx, "labels", req.GetMachineId(), func(spec *resources.MachineIntentSpec) error {
		labels := make(map[string]string, len(spec.Labels)+len(req.GetSet()))

		for k, v := range spec.Labels {
			if !slices.Contains(req.GetRemove(), k) {
				labels[k] = v
			}
		}

		for k, v := range req.GetSet() {
			labels[k] = v
		}

		if len(labels) > maxUserLabels {
			return status.Errorf(codes.InvalidArgument, "machine %q would have %d labels, at most %d", req.GetMachineId(), len(labels), maxUserLabels)
		}

		spec.Labels = labels
		if len(labels) == 0 {
			spec.Labels = nil
		}

		return nil
	})

	return &controlv1.SetLabelsResponse{Intent: in}, err
}

// validateLabelChange checks every key and value, and that no key is both set and
// removed (which one was meant is anyone's guess).
func validateLabelChange(set map[string]string, remove []string) error {
	if len(set) == 0 && len(remove) == 0 {
		return fmt.Errorf("no label to set or remove")
	}

	if len(set) > maxUserLabels || len(remove) > maxUserLabels {
		return fmt.Errorf("too many labels in one request: at most %d to set and %d to remove", maxUserLabels, maxUserLabels)
	}

	for k, v := range set {
		if err := resources.ValidateUserLabel(k, v); err != nil {
			return err
		}
	}

	for _, k := range remove {
		if err := resources.ValidateUserLabel(k, ""); err != nil {
			return err
		}

		if _, ok := set[k]; ok {
			return fmt.Errorf("label %q is both set and removed", k)
		}
	}

	return nil
}
