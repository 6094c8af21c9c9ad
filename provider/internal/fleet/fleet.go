// Package fleet joins what the provider holds of each machine — its identity, intent,
// status, inventory, BMC, power and Omni's view — into one record, the way an operator
// reads a machine: anvilctl prints records, the web console renders them.
//
// Records never carry secrets: BMC passwords live in resources no record reads, Omni's
// node unique tokens are always redacted and a machine config only when asked.
package fleet

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/cosi-project/runtime/pkg/controller/generic"
	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"

	"github.com/anvil-metal/anvil/provider/internal/lifecycle"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// Record is one machine with what was asked of it and what was observed.
type Record struct {
	ID      string                       `yaml:"id"`
	Labels  map[string]string            `yaml:"labels,omitempty"`
	Machine resources.MachineSpec        `yaml:"machine"`
	Intent  resources.MachineIntentSpec  `yaml:"intent"`
	Status  *resources.MachineStatusSpec `yaml:"status,omitempty"`
	// Inventory is what the machine's agent reported.
	Inventory *resources.MachineInventorySpec `yaml:"inventory,omitempty"`
	// BMC is how its power is reached (never the password); Power what was seen of it.
	BMC   *resources.BMCConfigSpec   `yaml:"bmc,omitempty"`
	Power *resources.PowerStatusSpec `yaml:"power,omitempty"`
	// Omni is what Omni decides of the machine, in Omni mode (its node unique token
	// redacted).
	Omni *resources.OmniMachineSpec `yaml:"omni,omitempty"`
}

// Options choose the records.
type Options struct {
	// ID picks one machine; empty lists them all.
	ID string
	// Query keeps the machines whose effective labels match it.
	Query resource.LabelQuery
	// ShowConfig keeps allocations' machine configs (the cluster's secrets) in the
	// records; otherwise each is replaced by a note of its size.
	ShowConfig bool
}

// RedactedToken stands for a node unique token.
const RedactedToken = "<redacted>"

// RedactedConfig stands for a machine config of n bytes.
func RedactedConfig(n int) string {
	return fmt.Sprintf("(redacted: %d bytes, --show-config prints it)", n)
}

// ErrNotFound is returned by List for an ID no machine has.
type ErrNotFound struct{ ID string }

func (e ErrNotFound) Error() string { return fmt.Sprintf("machine %q is not known", e.ID) }

// List returns the records, in the order of their IDs. It reads each resource type
// once, whatever the number of machines.
func List(ctx context.Context, st state.State, opts Options) ([]Record, error) {
	if opts.ID != "" && len(opts.Query.Terms) > 0 {
		return nil, fmt.Errorf("a label selector picks among machines: give no machine ID with it")
	}

	var machines []*resources.Machine

	if opts.ID != "" {
		m, err := safe.StateGetByID[*resources.Machine](ctx, st, opts.ID)
		if err != nil {
			if state.IsNotFoundError(err) {
				return nil, ErrNotFound{ID: opts.ID}
			}

			return nil, fmt.Errorf("error getting machine %q: %w", opts.ID, err)
		}

		machines = append(machines, m)
	} else {
		list, err := safe.StateListAll[*resources.Machine](ctx, st)
		if err != nil {
			return nil, fmt.Errorf("error listing machines: %w", err)
		}

		machines = slices.Collect(list.All())
	}

	// The effective labels; with a selector, the provider's state picks the machines.
	labelsByID, err := byID[*resources.MachineLabels](ctx, st, opts.ID, "machine labels", state.WithLabelQuery(resource.RawLabelQuery(opts.Query)))
	if err != nil {
		return nil, err
	}

	if len(opts.Query.Terms) > 0 {
		machines = slices.DeleteFunc(machines, func(m *resources.Machine) bool { return labelsByID[m.Metadata().ID()] == nil })
	}

	intents, err := byID[*resources.MachineIntent](ctx, st, opts.ID, "machine intents")
	if err != nil {
		return nil, err
	}

	statuses, err := byID[*resources.MachineStatus](ctx, st, opts.ID, "machine statuses")
	if err != nil {
		return nil, err
	}

	inventories, err := byID[*resources.MachineInventory](ctx, st, opts.ID, "machine inventories")
	if err != nil {
		return nil, err
	}

	bmcs, err := byID[*resources.BMCConfig](ctx, st, opts.ID, "BMC configs")
	if err != nil {
		return nil, err
	}

	powers, err := byID[*resources.PowerStatus](ctx, st, opts.ID, "power statuses")
	if err != nil {
		return nil, err
	}

	omnis, err := byID[*resources.OmniMachine](ctx, st, opts.ID, "Omni's view of the machines")
	if err != nil {
		return nil, err
	}

	records := make([]Record, 0, len(machines))

	for _, m := range machines {
		id := m.Metadata().ID()
		r := Record{ID: id, Machine: m.TypedSpec().DeepCopy(), Intent: *resources.NewMachineIntent(id).TypedSpec()}

		// Effective labels once the provider has computed them, the static ones until then.
		if ml, ok := labelsByID[id]; ok {
			if l := ml.Metadata().Labels().Raw(); len(l) > 0 {
				r.Labels = l
			}
		} else if l := m.Metadata().Labels().Raw(); len(l) > 0 {
			r.Labels = l
		}

		if in, ok := intents[id]; ok {
			r.Intent = in.TypedSpec().DeepCopy()
		}

		r.Status = specOf(statuses, id)
		r.Inventory = specOf(inventories, id)
		r.BMC = specOf(bmcs, id)
		r.Power = specOf(powers, id)
		r.Omni = specOf(omnis, id)

		if r.Omni != nil && r.Omni.NodeUniqueToken != "" {
			r.Omni.NodeUniqueToken = RedactedToken
		}

		if a := r.Intent.Allocation; a != nil && a.Config != "" && !opts.ShowConfig {
			a.Config = RedactedConfig(len(a.Config))
		}

		records = append(records, r)
	}

	slices.SortFunc(records, func(a, b Record) int { return strings.Compare(a.ID, b.ID) })

	return records, nil
}

// byID reads one type into a map by ID: the machine id's resource alone (a Get: a
// machine's page need not list the fleet), or every one when id is empty.
func byID[R generic.ResourceWithRD](ctx context.Context, st state.State, id, what string, opts ...state.ListOption) (map[string]R, error) {
	if id != "" {
		r, err := safe.StateGetByID[R](ctx, st, id)

		switch {
		case err == nil:
			return map[string]R{id: r}, nil
		case state.IsNotFoundError(err):
			return map[string]R{}, nil
		default:
			return nil, fmt.Errorf("error getting %s of machine %q: %w", what, id, err)
		}
	}

	list, err := safe.StateListAll[R](ctx, st, opts...)
	if err != nil {
		return nil, fmt.Errorf("error listing %s: %w", what, err)
	}

	out := make(map[string]R, list.Len())
	for r := range list.All() {
		out[r.Metadata().ID()] = r
	}

	return out, nil
}

// specOf is a deep copy of the spec of the machine's resource, nil when it has none.
func specOf[S interface{ DeepCopy() S }, R interface{ TypedSpec() *S }](m map[string]R, id string) *S {
	r, ok := m[id]
	if !ok {
		return nil
	}

	s := (*r.TypedSpec()).DeepCopy()

	return &s
}

// Lifecycle is the record as the lifecycle rules read it.
func (r Record) Lifecycle() lifecycle.Machine {
	return lifecycle.Machine{ID: r.ID, Machine: &r.Machine, Intent: &r.Intent, Status: r.Status, BMC: r.BMC}
}
