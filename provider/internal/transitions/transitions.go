// Package transitions is the domain code of what may be asked of a machine: accept,
// reject, allocate, deallocate, mark installed, cordon, power, reboot, wipe mode,
// labels and BMC details. Each checks the request and the machine's state, and writes
// the desired state (MachineIntent, of which this package is the only writer; BMCConfig
// and BMCSecret), returning an *Error that says why when it refuses.
//
// Callers translate: the control API (anvilctl) maps requests and codes to gRPC, the
// auto-accept controller and the agent reports call in directly, and the Omni adapter
// maps Omni's infra resources onto the same functions.
package transitions

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/image-factory/pkg/schematic"
	"go.uber.org/zap"

	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// InstalledByManual is the source MarkInstalled records.
const InstalledByManual = "manual"

// InstallRecorder records that Talos is installed for an allocation. MachineStatus has
// one writer, its controller, so the transitions do not write it: the provider wiring
// implements this by handing the fact to that controller.
type InstallRecorder interface {
	RecordInstalled(ctx context.Context, machineID, allocationID, source string) error
}

// SchematicFunc builds the Image Factory schematic an allocation boots. The provider
// wiring supplies it to add what it needs (its own kernel args, detected extensions);
// DefaultSchematic is the user's extensions and kernel args alone.
type SchematicFunc func(ctx context.Context, machineID string, alloc resources.Allocation) (schematic.Schematic, error)

// DefaultSchematic is the schematic of the allocation's extensions and kernel args.
func DefaultSchematic(_ context.Context, _ string, alloc resources.Allocation) (schematic.Schematic, error) {
	return schematic.Schematic{
		Customization: schematic.Customization{
			SystemExtensions: schematic.SystemExtensions{OfficialExtensions: alloc.Extensions},
			ExtraKernelArgs:  alloc.KernelArgs,
		},
	}, nil
}

// Options configure the transitions.
type Options struct {
	// Recorder records manual installs; nil: MarkInstalled is unavailable.
	Recorder InstallRecorder
	// SchematicFor builds an allocation's schematic; nil means DefaultSchematic.
	SchematicFor SchematicFunc
	// ManagedBy names who owns acceptance, allocation, power, wipe and reboot requests
	// when it is not this provider's own control ("Omni at https://…"): those
	// transitions are then refused, saying so; the rest stay available. Owner returns
	// the transitions that owner itself applies.
	ManagedBy string
	Logger    *zap.Logger
	// Now stamps allocations; time.Now when nil.
	Now func() time.Time
}

// Service applies transitions to the provider's state.
type Service struct {
	*core

	// managedBy is set on the view local callers get when another owner decides.
	managedBy string
}

// core is what every view of the service shares: above all the lock.
type core struct {
	st           state.State
	recorder     InstallRecorder
	schematicFor SchematicFunc
	logger       *zap.Logger
	now          func() time.Time

	// mu serializes transitions: each reads the machine's state, decides, then writes,
	// and two concurrent transitions on one machine must not both pass the check.
	mu sync.Mutex
}

// New returns the transitions over st.
func New(st state.State, opts Options) *Service {
	c := &core{st: st, recorder: opts.Recorder, schematicFor: opts.SchematicFor, logger: opts.Logger, now: opts.Now}

	if c.schematicFor == nil {
		c.schematicFor = DefaultSchematic
	}

	if c.logger == nil {
		c.logger = zap.NewNop()
	}

	if c.now == nil {
		c.now = time.Now
	}

	return &Service{core: c, managedBy: opts.ManagedBy}
}

// Owner returns the transitions as the owner of acceptance, allocation, power, wipe and
// reboot requests applies them (the Omni adapter): nothing is refused for being owned
// elsewhere. It shares the service's lock.
func (s *Service) Owner() *Service { return &Service{core: s.core} }

// owned refuses a transition the owner named by ManagedBy decides.
func (s *Service) owned(name string) error {
	if s.managedBy == "" {
		return nil
	}

	return &Error{Code: CodeManaged, Msg: fmt.Sprintf("%s: this provider is managed by %s, which decides it", name, s.managedBy)}
}

// Accept hands a pending or rejected machine to the provider. Acceptance owes a wipe,
// unless skipWipe says the machine holds nothing: whatever was on the disks is not
// handed to the next user.
func (s *Service) Accept(ctx context.Context, id string, skipWipe bool) (*resources.MachineIntentSpec, error) {
	if err := s.owned("accept"); err != nil {
		return nil, err
	}

	return s.transition(ctx, "accept", id, func(spec *resources.MachineIntentSpec) error {
		accept(spec, skipWipe)

		return nil
	})
}

// accept is the acceptance rule both Accept and AcceptPending apply: accepting an
// accepted machine changes nothing, otherwise a wipe is owed unless skipped.
func accept(spec *resources.MachineIntentSpec, skipWipe bool) {
	if spec.Acceptance == resources.AcceptanceAccepted {
		return
	}

	spec.Acceptance = resources.AcceptanceAccepted

	if !skipWipe {
		spec.WipeID = NewID()
	}
}

// errNotPending is how AcceptPending's change refuses a machine that is no longer pending.
var errNotPending = errors.New("machine is not pending")

// AcceptPending accepts a machine for the provider itself (--auto-accept), by the rule
// Accept applies, with the initial wipe owed; reason says why, for the log. Only a
// pending machine is accepted — never a rejected one, whose rejection a person decided —
// and that is checked under the transitions' lock, so a rejection made since the caller
// looked wins. It reports whether the machine was accepted.
func (s *Service) AcceptPending(ctx context.Context, id, reason string) (bool, error) {
	if err := s.owned("auto-accept"); err != nil {
		return false, err
	}

	_, err := s.transition(ctx, "auto-accept", id, func(spec *resources.MachineIntentSpec) error {
		if spec.Acceptance != resources.AcceptancePending {
			return errNotPending
		}

		accept(spec, false)

		return nil
	}, zap.String("reason", reason))

	switch {
	case errors.Is(err, errNotPending):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("error accepting machine %s: %w", id, err)
	}

	return true, nil
}

// Reject keeps the provider off a machine; it stays listed as rejected.
func (s *Service) Reject(ctx context.Context, id string) (*resources.MachineIntentSpec, error) {
	if err := s.owned("reject"); err != nil {
		return nil, err
	}

	return s.transition(ctx, "reject", id, func(spec *resources.MachineIntentSpec) error {
		if spec.Allocation != nil {
			return refused(fmt.Sprintf("machine %q is allocated: deallocate it before rejecting it", id))
		}

		spec.Acceptance = resources.AcceptanceRejected

		return nil
	})
}

// AllocationRequest is what a machine is handed to.
type AllocationRequest struct {
	TalosVersion string
	Extensions   []string
	KernelArgs   []string
	// Config is the Talos machine configuration the metadata server serves it.
	Config []byte
}

// Allocate hands an accepted, unallocated, uncordoned machine to Talos. A wipe still
// owed is done first (the agent sees to it before it boots Talos).
func (s *Service) Allocate(ctx context.Context, id string, req AllocationRequest) (*resources.MachineIntentSpec, error) {
	if err := s.owned("allocate"); err != nil {
		return nil, err
	}

	alloc, err := s.newAllocation(ctx, id, req)
	if err != nil {
		return nil, err
	}

	return s.transition(ctx, "allocate", id, func(spec *resources.MachineIntentSpec) error {
		switch {
		case spec.Acceptance != resources.AcceptanceAccepted:
			return refused(fmt.Sprintf("machine %q is %s: accept it before allocating it", id, spec.Acceptance))
		case spec.Allocation != nil:
			return refused(fmt.Sprintf("machine %q is already allocated (allocation %s): deallocate it first", id, spec.Allocation.ID))
		case spec.Cordoned:
			return refused(fmt.Sprintf("machine %q is cordoned: uncordon it before allocating it", id))
		}

		spec.Allocation = alloc

		return nil
	})
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

	if len(req.Config) > 0 {
		if err = validateConfig(req.Config); err != nil {
			return nil, invalid(err)
		}
	}

	alloc := &resources.Allocation{
		ID:           NewID(),
		TalosVersion: version,
		Extensions:   exts,
		KernelArgs:   args,
		Config:       string(req.Config),
		AllocatedAt:  s.now().UTC().Truncate(time.Second),
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

// Deallocate clears the allocation and owes a wipe before the machine is handed out
// again; it also asks for a reboot, so that a machine running Talos goes back to the
// agent through its BMC (PXE once, then a cycle) to be wiped.
func (s *Service) Deallocate(ctx context.Context, id string) (*resources.MachineIntentSpec, error) {
	if err := s.owned("deallocate"); err != nil {
		return nil, err
	}

	return s.transition(ctx, "deallocate", id, func(spec *resources.MachineIntentSpec) error {
		if spec.Allocation == nil {
			return refused(fmt.Sprintf("machine %q is not allocated", id))
		}

		spec.Allocation = nil
		spec.WipeID = NewID()
		spec.RebootID = NewID()

		return nil
	})
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

	s.mu.Lock()
	defer s.mu.Unlock()

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

// SetWipeMode sets how this machine's disks are wiped; empty follows the provider's
// default. It applies to wipes ordered from now on.
func (s *Service) SetWipeMode(ctx context.Context, id, mode string) (*resources.MachineIntentSpec, error) {
	if mode != "" && !slices.Contains(resources.WipeModes, mode) {
		return nil, &Error{Code: CodeInvalid, Msg: fmt.Sprintf("wipe mode %q is not one of %s (or empty for the provider's default)", mode, strings.Join(resources.WipeModes, ", "))}
	}

	return s.transition(ctx, "wipe-mode", id, func(spec *resources.MachineIntentSpec) error {
		spec.WipeMode = mode

		return nil
	})
}

// SetCordon keeps a machine from being handed out (cordoned) or lifts that.
func (s *Service) SetCordon(ctx context.Context, id string, cordoned bool) (*resources.MachineIntentSpec, error) {
	name := "uncordon"
	if cordoned {
		name = "cordon"
	}

	if err := s.owned(name); err != nil {
		return nil, err
	}

	return s.transition(ctx, name, id, func(spec *resources.MachineIntentSpec) error {
		spec.Cordoned = cordoned

		return nil
	})
}

// SetPower sets the desired power: on, off, or default (the provider's policy).
func (s *Service) SetPower(ctx context.Context, id string, power resources.PowerState) (*resources.MachineIntentSpec, error) {
	if err := s.owned("power"); err != nil {
		return nil, err
	}

	switch power {
	case resources.PowerOn, resources.PowerOff, resources.PowerDefault:
	default:
		return nil, &Error{Code: CodeInvalid, Msg: "power must be on, off or default"}
	}

	return s.transition(ctx, "power", id, func(spec *resources.MachineIntentSpec) error {
		spec.Power = power

		return nil
	})
}

// Reboot asks for a reboot of an accepted machine, through its BMC (PXE once, then a
// cycle), and returns the request's ID. Pending and rejected machines are never touched.
func (s *Service) Reboot(ctx context.Context, id string) (*resources.MachineIntentSpec, string, error) {
	if err := s.owned("reboot"); err != nil {
		return nil, "", err
	}

	rebootID := NewID()

	spec, err := s.transition(ctx, "reboot", id, func(spec *resources.MachineIntentSpec) error {
		if spec.Acceptance != resources.AcceptanceAccepted {
			return refused(fmt.Sprintf("machine %q is %s: only accepted machines are rebooted", id, spec.Acceptance))
		}

		spec.RebootID = rebootID

		return nil
	})

	return spec, rebootID, err
}

// transition checks that the machine is known, applies change to its intent (a pending
// intent when it has none) and writes the result.
func (s *Service) transition(ctx context.Context, name, id string, change func(*resources.MachineIntentSpec) error, logFields ...zap.Field) (*resources.MachineIntentSpec, error) {
	s.mu.Lock()
	defer s.mu.Unlock()

	if _, err := s.current(ctx, id); err != nil {
		return nil, err
	}

	var refusal error

	intent, err := safe.StateModifyWithResult(ctx, s.st, resources.NewMachineIntent(id), func(in *resources.MachineIntent) error {
		refusal = change(in.TypedSpec())

		return refusal
	})

	switch {
	case refusal != nil:
		return nil, refusal
	case err != nil:
		return nil, fmt.Errorf("error writing the intent of machine %q: %w", id, err)
	}

	// The config is never logged: it carries the cluster's secrets.
	s.logger.Info("transition", append([]zap.Field{zap.String("transition", name), zap.String("machine", id),
		zap.String("acceptance", string(intent.TypedSpec().Acceptance))}, logFields...)...)

	spec := intent.TypedSpec().DeepCopy()

	return &spec, nil
}

// current returns the machine's intent spec (pending when it has none); a machine never
// seen is refused with CodeNotFound.
func (s *Service) current(ctx context.Context, id string) (resources.MachineIntentSpec, error) {
	if err := validateMachineID(id); err != nil {
		return resources.MachineIntentSpec{}, invalid(err)
	}

	if _, err := safe.StateGetByID[*resources.Machine](ctx, s.st, id); err != nil {
		if state.IsNotFoundError(err) {
			return resources.MachineIntentSpec{}, &Error{Code: CodeNotFound, Msg: fmt.Sprintf("machine %q is not known", id)}
		}

		return resources.MachineIntentSpec{}, fmt.Errorf("error reading machine %q: %w", id, err)
	}

	intent, err := safe.StateGetByID[*resources.MachineIntent](ctx, s.st, id)

	switch {
	case state.IsNotFoundError(err):
		return *resources.NewMachineIntent(id).TypedSpec(), nil
	case err != nil:
		return resources.MachineIntentSpec{}, fmt.Errorf("error reading the intent of machine %q: %w", id, err)
	}

	return intent.TypedSpec().DeepCopy(), nil
}

// NewID returns a random identifier for an allocation, a wipe or a reboot request.
func NewID() string {
	var b [8]byte

	// crypto/rand.Read never returns an error (Go 1.24+): it crashes the program
	// irrecoverably instead, where the kernel has no randomness to give.
	rand.Read(b[:]) // documented never to fail

	return hex.EncodeToString(b[:])
}
