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
	"github.com/anvil-metal/anvil/internal/disksel"
	"github.com/anvil-metal/anvil/provider/internal/configpatch"
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
	// InstallDisk selects the install disk among the machine's inventory (a disk
	// selector); "" takes Options.InstallDisk, and none leaves it to the config.
	InstallDisk string
	// DryRun checks the request and resolves the install disk without allocating: the
	// intent returned is the one the allocation would make.
	DryRun bool

	// configChoosesDisk leaves the install disk to the config whatever the provider's
	// default: Omni's allocations, whose config is Omni's.
	configChoosesDisk bool
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

	allocate := func(spec *resources.MachineIntentSpec) error {
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
	}

	if req.DryRun {
		spec, err := s.current(ctx, id)
		if err != nil {
			return nil, err
		}

		if err = allocate(&spec); err != nil {
			return nil, err
		}

		return &spec, nil
	}

	return s.transition(ctx, "allocate", id, allocate, zap.String("owner", req.Owner), zap.Stringp("installDisk", installDiskLogged(alloc)))
}

// installDiskLogged is the identity of the allocation's install disk, for its log line.
func installDiskLogged(alloc *resources.Allocation) *string {
	if alloc.InstallDisk == nil {
		return nil
	}

	return &alloc.InstallDisk.Identity
}

// reclaim is a claim asked again by the owner that holds it: the configuration is the
// new request's, the rest must be what was allocated.
func reclaim(id string, cur, next *resources.Allocation) error {
	if cur.TalosVersion != next.TalosVersion || !slices.Equal(cur.KernelArgs, next.KernelArgs) {
		return refused(fmt.Sprintf("machine %q is allocated to %s with Talos %s and kernel args %q: release it before asking for Talos %s and %q",
			id, cur.Owner, cur.TalosVersion, cur.KernelArgs, next.TalosVersion, next.KernelArgs))
	}

	if (cur.InstallDisk == nil) != (next.InstallDisk == nil) || (cur.InstallDisk != nil && cur.InstallDisk.Identity != next.InstallDisk.Identity) {
		return refused(fmt.Sprintf("machine %q is allocated to %s with install disk %s: release it before asking for %s",
			id, cur.Owner, installDiskText(cur.InstallDisk), installDiskText(next.InstallDisk)))
	}

	cur.Config = next.Config

	return nil
}

func installDiskText(d *resources.InstallDisk) string {
	if d == nil {
		return "(the config's)"
	}

	return d.Identity
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

	var (
		installDisk *resources.InstallDisk
		config      = req.Config
	)

	if !req.configChoosesDisk {
		var identity disksel.Identity

		if installDisk, identity, err = s.installDisk(ctx, id, req.InstallDisk); err != nil {
			return nil, err
		}

		// The served config names the disk: the user's other documents stay byte for byte.
		if installDisk != nil && len(config) > 0 {
			if config, err = configpatch.WithInstallDisk(config, identity); err != nil {
				return nil, invalid(fmt.Errorf("giving the config its install disk: %w", err))
			}
		}
	}

	alloc := &resources.Allocation{
		InstallDisk:        installDisk,
		ID:                 NewID(),
		TalosVersion:       version,
		Extensions:         extensions.Merge(detected, exts, excluded),
		DetectedExtensions: detected,
		KernelArgs:         args,
		Config:             string(config),
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

// installDisk resolves the install disk selector (the request's, else the provider's
// default) against the machine's inventory: exactly one disk, named by a serial or WWID
// no other disk of the machine has. No selector leaves the disk to the config (nil).
func (s *Service) installDisk(ctx context.Context, id, selector string) (*resources.InstallDisk, disksel.Identity, error) {
	if selector == "" {
		selector = s.defaultInstallDisk
	}

	if selector == "" {
		return nil, disksel.Identity{}, nil // no selector: the config chooses
	}

	sel, err := disksel.Parse(selector)
	if err != nil {
		return nil, disksel.Identity{}, invalid(err)
	}

	inv, err := safe.StateGetByID[*resources.MachineInventory](ctx, s.st, id)

	switch {
	case state.IsNotFoundError(err):
		return nil, disksel.Identity{}, refused(fmt.Sprintf("machine %q has reported no inventory: its install disk %q cannot be chosen yet", id, selector))
	case err != nil:
		return nil, disksel.Identity{}, &Error{Code: CodeUnavailable, Msg: fmt.Sprintf("error reading the inventory of machine %q: %v", id, err)}
	}

	// The selector is sound, the machine does not fit it: refused, so that a claimant
	// choosing among machines (Cluster API) goes on to the next.
	disk, identity, err := sel.ResolveIdentity(inventory.Disks(inv.TypedSpec()))
	if err != nil {
		return nil, disksel.Identity{}, refused(fmt.Sprintf("machine %q: %v", id, err))
	}

	return &resources.InstallDisk{Selector: selector, Identity: identity.String(), Disk: disk.String()}, identity, nil
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

		endAllocation(spec)

		return nil
	})
}

// endAllocation takes the machine back from its allocation: a wipe is owed, and a reboot
// brings its agent back to do it. The disk the allocation installed to is the one the
// install-disk wipe scope wipes, whatever the next allocation chooses.
func endAllocation(spec *resources.MachineIntentSpec) {
	spec.InstallDisk = ""
	if spec.Allocation.InstallDisk != nil {
		spec.InstallDisk = spec.Allocation.InstallDisk.Identity
	}

	spec.Allocation = nil
	spec.WipeID = NewID()
	spec.RebootID = NewID()
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

		endAllocation(spec)

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
