package transitions

import (
	"context"
	"fmt"
	"slices"

	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// maxUserLabels bounds a machine's own labels, so one request cannot bloat its intent.
const maxUserLabels = 64

// SetLabels sets and removes the user's own labels on a machine, in any state. The
// effective labels (MachineLabels) follow from the MachineLabelsController.
func (s *Service) SetLabels(ctx context.Context, id string, set map[string]string, remove []string) (*resources.MachineIntentSpec, error) {
	if err := validateLabelChange(set, remove); err != nil {
		return nil, invalid(err)
	}

	return s.transition(ctx, "labels", id, func(spec *resources.MachineIntentSpec) error {
		labels := make(map[string]string, len(spec.Labels)+len(set))

		for k, v := range spec.Labels {
			if !slices.Contains(remove, k) {
				labels[k] = v
			}
		}

		for k, v := range set {
			labels[k] = v
		}

		if len(labels) > maxUserLabels {
			return &Error{Code: CodeInvalid, Msg: fmt.Sprintf("machine %q would have %d labels, at most %d", id, len(labels), maxUserLabels)}
		}

		spec.Labels = labels
		if len(labels) == 0 {
			spec.Labels = nil
		}

		return nil
	})
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
