package transitions

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"go.uber.org/zap"

	"github.com/anvil-metal/anvil/extensions"
	"github.com/anvil-metal/anvil/provider/internal/inventory"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// AllocationRequest is what a machine is handed to.
type AllocationRequest struct {
	TalosVersion string
	Extensions   []string
	KernelArgs   []string
	// Config is the Talos machine configuration the metadata server serves it.
	Config []byte
	// NoDetectedExtensions leaves out the extensions the machine's hardware calls for,
	// which are otherwise merged in (as Options.DetectedExtensions says); the ones in
	// ExcludeExtensions are left out either way. A requested extension always stays.
	NoDetectedExtensions bool
	ExcludeExtensions    []string
	// Owner names who claims the machine; it makes Allocate idempotent for that owner.
	Owner string
}

// Allocate hands an accepted, unallocated, uncordoned machine to Talos. A wipe still
// owed is done first (the agent sees to it before it boots Talos).
//
// A request with an owner is a claim: on a machine that owner holds already, it keeps
// the allocation (its ID, so the machine's metadata token stays valid) and replaces its
// machine configuration, so that a claimant that lost track of its claim (restarted) or
// whose configuration changed asks again rather than asking what it holds.
func (s *Service) Allocate(ctx context.Context, id string, req AllocationRequest) (*resources.MachineIntentSpec, error) {
	if err := s.owned("allocate"); err != nil {
		return nil, err
	}

	alloc, err := s.newAllocation(ctx, id, req)
	if err != nil {
		return nil, err
	}

	return s.transition(ctx, "allocate", id, func(spec *resources.MachineIntentSpec) error {
		if req.Owner != "" {
			if spec.Allocation != nil && spec.Allocation.Owner == req.Owner {
				return reclaim(id, spec.Allocation, alloc)
			}

			// Under the service's lock, as every intent is written: two claimants with
			// one owner (two managers, a restart) never hold two machines.
			held, err := resources.MachineHeldBy(ctx, s.st, req.Owner)
			if err != nil {
				return err
			}

			if held != "" {
				return &Error{Code: CodeRefused, Holding: held,
					Msg: fmt.Sprintf("%s holds machine %q already: an owner holds one machine", req.Owner, held)}
			}
		}

		switch {
		case spec.Acceptance != resources.AcceptanceAccepted:
			return refused(fmt.Sprintf("machine %q is %s: accept it before allocating it", id, spec.Acceptance))
		case spec.Allocation != nil:
			return refused(fmt.Sprintf("machine %q is already allocated (allocation %s): deallocate it first", id, spec.Allocation.ID))
		case spec.Held != "":
			return refused(fmt.Sprintf("machine %q is held after a security event (%s): look into it, then uncordon it before allocating it", id, spec.Held))
		case spec.Cordoned:
			return refused(fmt.Sprintf("machine %q is cordoned: uncordon it before allocating it", id))
		}

		spec.Allocation = alloc

		return nil
	}, zap.String("owner", req.Owner))
}

// reclaim is a claim asked again by the owner that holds it: the configuration is the
// new request's, the rest must be what was allocated.
func reclaim(id string, cur, next *resources.Allocation) error {
	if cur.TalosVersion != next.TalosVersion || !slices.Equal(cur.KernelArgs, next.KernelArgs) {
		return refused(fmt.Sprintf("machine %q is allocated to %s with Talos %s and kernel args %q: release it before asking for Talos %s and %q",
			id, cur.Owner, cur.TalosVersion, cur.KernelArgs, next.TalosVersion, next.KernelArgs))
	}

	cur.Config = next.Config

	return nil
}

// newAllocation validates the request and builds the allocation, schematic ID included.
func (s *Service) newAllocation(ctx context.Context, id string, req AllocationRequest) (*resources.Allocation, error) {
	version, err := validateTalosVersion(req.TalosVersion)
	if err != nil {
		return nil, invalid(err)
	}

	exts, err := validateExtensions(req.Extensions)
	if err != nil {
		return nil, invalid(err)
	}

	args, err := validateKernelArgs(req.KernelArgs)
	if err != nil {
		return nil, invalid(err)
	}

	if err = validateOwner(req.Owner); err != nil {
		return nil, invalid(err)
	}

	if len(req.Config) > 0 {
		if err = validateConfig(req.Config); err != nil {
			return nil, invalid(err)
		}
	}

	excluded, err := validateExtensions(req.ExcludeExtensions)
	if err != nil {
		return nil, invalid(fmt.Errorf("excluded: %w", err))
	}

	var detected []string

	if s.detectedExtensions && !req.NoDetectedExtensions {
		if detected, err = s.detected(ctx, id, version, excluded); err != nil {
			return nil, err
		}
	}

	alloc := &resources.Allocation{
		ID:                 NewID(),
		TalosVersion:       version,
		Extensions:         extensions.Merge(detected, exts, excluded),
		DetectedExtensions: detected,
		KernelArgs:         args,
		Config:             string(req.Config),
		AllocatedAt:        s.now().UTC().Truncate(time.Second),
		Owner:              req.Owner,
	}

	sch, err := s.schematicFor(ctx, id, *alloc)
	if err != nil {
		return nil, fmt.Errorf("error building the schematic: %w", err)
	}

	if alloc.SchematicID, err = sch.ID(); err != nil {
		return nil, fmt.Errorf("error computing the schematic ID: %w", err)
	}

	return alloc, nil
}

// detected are the official extensions the machine's hardware calls for at the Talos
// version (the extensions catalog; optional ones are only suggested, in its labels),
// less the excluded ones.
func (s *Service) detected(ctx context.Context, id, version string, excluded []string) ([]string, error) {
	inv, err := safe.StateGetByID[*resources.MachineInventory](ctx, s.st, id)

	switch {
	case state.IsNotFoundError(err):
		return nil, nil // no inventory reported: nothing detected
	case err != nil:
		return nil, &Error{Code: CodeUnavailable, Msg: fmt.Sprintf("error reading the inventory of machine %q: %v", id, err)}
	}

	var out []string

	for _, sg := range inventory.SuggestedExtensions(inv.TypedSpec(), version) {
		if !sg.Optional && !slices.Contains(excluded, sg.Extension) {
			out = append(out, sg.Extension)
		}
	}

	return out, nil
}

// Deallocate clears the allocation and owes a wipe before the machine is handed out
// again; it also asks for a reboot, so that a machine running Talos goes back to the
// agent through its BMC (PXE once, then a cycle) to be wiped.
//
// Under another owner (Omni) only an allocation made locally, before that owner took
// over, may be released: that is how a machine a standalone provider handed out is
// handed to Omni (see ApplyOmni). The owner's own allocations are its to end.
func (s *Service) Deallocate(ctx context.Context, id string) (*resources.MachineIntentSpec, error) {
	return s.transition(ctx, "deallocate", id, func(spec *resources.MachineIntentSpec) error {
		if s.managedBy != "" && !localAllocation(spec.Allocation) {
			return s.owned("deallocate")
		}

		if spec.Allocation == nil {
			return refused(fmt.Sprintf("machine %q is not allocated", id))
		}

		spec.Allocation = nil
		spec.WipeID = NewID()
		spec.RebootID = NewID()

		return nil
	})
}

// Release takes back the claim owner holds on a machine, as Deallocate does. A machine
// allocated to another owner (or to a person) is refused; one not allocated is left as
// it is, so that releasing twice wipes once.
func (s *Service) Release(ctx context.Context, id, owner string) (*resources.MachineIntentSpec, error) {
	if err := validateOwner(owner); err != nil || owner == "" {
		return nil, invalid(cmp.Or(err, errors.New("release: an owner is required")))
	}

	return s.transition(ctx, "release", id, func(spec *resources.MachineIntentSpec) error {
		switch {
		case spec.Allocation == nil:
			return nil
		case spec.Allocation.Owner != owner:
			return refused(fmt.Sprintf("machine %q is allocated to %s, not to %s", id, cmp.Or(spec.Allocation.Owner, "a person"), owner))
		}

		spec.Allocation = nil
		spec.WipeID = NewID()
		spec.RebootID = NewID()

		return nil
	}, zap.String("owner", owner))
}

// MarkInstalled records by hand that Talos is installed for the current allocation,
// and returns that allocation's ID.
func (s *Service) MarkInstalled(ctx context.Context, id string) (string, error) {
	if err := s.owned("installed"); err != nil {
		return "", err
	}

	if s.recorder == nil {
		return "", &Error{Code: CodeUnavailable, Msg: "this provider does not record installs by hand"}
	}

	_, unlock, err := s.lock(ctx)
	if err != nil {
		return "", err
	}

	defer unlock()

	// Held across the recorder call so a deallocation cannot slip in between the check
	// and the record.
	intent, err := s.current(ctx, id)
	if err != nil {
		return "", err
	}

	if intent.Allocation == nil {
		return "", refused(fmt.Sprintf("machine %q is not allocated: there is no install to record", id))
	}

	if err = s.recorder.RecordInstalled(ctx, id, intent.Allocation.ID, InstalledByManual); err != nil {
		return "", fmt.Errorf("error recording the install of machine %q: %w", id, err)
	}

	s.logger.Info("transition", zap.String("transition", "installed"), zap.String("machine", id),
		zap.String("allocation", intent.Allocation.ID))

	return intent.Allocation.ID, nil
}
