package control

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
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	controlv1 "github.com/anvil-metal/anvil/api/control/v1"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// InstalledByManual is the source MarkInstalled records.
const InstalledByManual = "manual"

// InstallRecorder records that Talos is installed for an allocation. MachineStatus has
// one writer, its controller, so the control API does not write it: the provider wiring
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

// Transitions implements controlv1.TransitionServiceServer over the provider's state.
type Transitions struct {
	controlv1.UnimplementedTransitionServiceServer

	st           state.State
	recorder     InstallRecorder
	schematicFor SchematicFunc
	logger       *zap.Logger
	now          func() time.Time

	// mu serializes transitions: each reads the machine's state, decides, then writes,
	// and two concurrent transitions on one machine must not both pass the check.
	mu sync.Mutex
}

// NewTransitions returns the transition service. recorder may be nil (MarkInstalled is
// then unavailable); schematicFor nil means DefaultSchematic.
func NewTransitions(st state.State, recorder InstallRecorder, schematicFor SchematicFunc, logger *zap.Logger) *Transitions {
	if schematicFor == nil {
		schematicFor = DefaultSchematic
	}

	if logger == nil {
		logger = zap.NewNop()
	}

	return &Transitions{st: st, recorder: recorder, schematicFor: schematicFor, logger: logger, now: time.Now}
}

// Accept hands a pending or rejected machine to the provider. Acceptance owes a wipe,
// unless the request says the machine holds nothing: whatever was on the disks is not
// handed to the next user.
func (t *Transitions) Accept(ctx context.Context, req *controlv1.AcceptRequest) (*controlv1.AcceptResponse, error) {
	in, err := t.transition(ctx, "accept", req.GetMachineId(), func(spec *resources.MachineIntentSpec) error {
		accept(spec, req.GetSkipInitialWipe())

		return nil
	})

	return &controlv1.AcceptResponse{Intent: in}, err
}

// accept is the acceptance rule both Accept and AcceptPending apply: accepting an
// accepted machine changes nothing, otherwise a wipe is owed unless skipped.
func accept(spec *resources.MachineIntentSpec, skipWipe bool) {
	if spec.Acceptance == resources.AcceptanceAccepted {
		return
	}

	spec.Acceptance = resources.AcceptanceAccepted

	if !skipWipe {
		spec.WipeID = newID()
	}
}

// errNotPending is how AcceptPending's change refuses a machine that is no longer pending.
var errNotPending = errors.New("machine is not pending")

// AcceptPending accepts a machine for the provider itself (--auto-accept), by the rule
// Accept applies, with the initial wipe owed; reason says why, for the log. Only a
// pending machine is accepted — never a rejected one, whose rejection a person decided —
// and that is checked under the transitions' lock, so a rejection made since the caller
// looked wins. It reports whether the machine was accepted.
func (t *Transitions) AcceptPending(ctx context.Context, id, reason string) (bool, error) {
	_, err := t.transition(ctx, "auto-accept", id, func(spec *resources.MachineIntentSpec) error {
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
func (t *Transitions) Reject(ctx context.Context, req *controlv1.RejectRequest) (*controlv1.RejectResponse, error) {
	in, err := t.transition(ctx, "reject", req.GetMachineId(), func(spec *resources.MachineIntentSpec) error {
		if spec.Allocation != nil {
			return failedPrecondition("machine %q is allocated: deallocate it before rejecting it", req.GetMachineId())
		}

		spec.Acceptance = resources.AcceptanceRejected

		return nil
	})

	return &controlv1.RejectResponse{Intent: in}, err
}

// Allocate hands an accepted, unallocated, uncordoned machine to Talos.
func (t *Transitions) Allocate(ctx context.Context, req *controlv1.AllocateRequest) (*controlv1.AllocateResponse, error) {
	id := req.GetMachineId()

	alloc, err := t.newAllocation(ctx, req)
	if err != nil {
		return nil, err
	}

	in, err := t.transition(ctx, "allocate", id, func(spec *resources.MachineIntentSpec) error {
		switch {
		case spec.Acceptance != resources.AcceptanceAccepted:
			return failedPrecondition("machine %q is %s: accept it before allocating it", id, spec.Acceptance)
		case spec.Allocation != nil:
			return failedPrecondition("machine %q is already allocated (allocation %s): deallocate it first", id, spec.Allocation.ID)
		case spec.Cordoned:
			return failedPrecondition("machine %q is cordoned: uncordon it before allocating it", id)
		}

		spec.Allocation = alloc

		return nil
	})

	return &controlv1.AllocateResponse{Intent: in}, err
}

// newAllocation validates the request and builds the allocation, schematic ID included.
func (t *Transitions) newAllocation(ctx context.Context, req *controlv1.AllocateRequest) (*resources.Allocation, error) {
	version, err := validateTalosVersion(req.GetTalosVersion())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}

	exts, err := validateExtensions(req.GetExtensions())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}

	args, err := validateKernelArgs(req.GetKernelArgs())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}

	if len(req.GetConfig()) > 0 {
		if err = validateConfig(req.GetConfig()); err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
	}

	alloc := &resources.Allocation{
		ID:           newID(),
		TalosVersion: version,
		Extensions:   exts,
		KernelArgs:   args,
		Config:       string(req.GetConfig()),
		AllocatedAt:  t.now().UTC().Truncate(time.Second),
	}

	sch, err := t.schematicFor(ctx, req.GetMachineId(), *alloc)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "error building the schematic: %v", err)
	}

	if alloc.SchematicID, err = sch.ID(); err != nil {
		return nil, status.Errorf(codes.Internal, "error computing the schematic ID: %v", err)
	}

	return alloc, nil
}

// Deallocate clears the allocation and owes a wipe before the machine is handed out
// again; it also asks for a reboot, so that a machine running Talos goes back to the
// agent through its BMC (PXE once, then a cycle) to be wiped.
func (t *Transitions) Deallocate(ctx context.Context, req *controlv1.DeallocateRequest) (*controlv1.DeallocateResponse, error) {
	in, err := t.transition(ctx, "deallocate", req.GetMachineId(), func(spec *resources.MachineIntentSpec) error {
		if spec.Allocation == nil {
			return failedPrecondition("machine %q is not allocated", req.GetMachineId())
		}

		spec.Allocation = nil
		spec.WipeID = newID()
		spec.RebootID = newID()

		return nil
	})

	return &controlv1.DeallocateResponse{Intent: in}, err
}

// MarkInstalled records by hand that Talos is installed for the current allocation.
func (t *Transitions) MarkInstalled(ctx context.Context, req *controlv1.MarkInstalledRequest) (*controlv1.MarkInstalledResponse, error) {
	id := req.GetMachineId()

	if t.recorder == nil {
		return nil, status.Error(codes.Unimplemented, "this provider does not record installs by hand")
	}

	t.mu.Lock()
	defer t.mu.Unlock()

	// Held across the recorder call so a deallocation cannot slip in between the check
	// and the record.
	intent, err := t.current(ctx, id)
	if err != nil {
		return nil, err
	}

	if intent.Allocation == nil {
		return nil, failedPrecondition("machine %q is not allocated: there is no install to record", id)
	}

	if err = t.recorder.RecordInstalled(ctx, id, intent.Allocation.ID, InstalledByManual); err != nil {
		return nil, status.Errorf(codes.Internal, "error recording the install of machine %q: %v", id, err)
	}

	t.logger.Info("transition", zap.String("transition", "installed"), zap.String("machine", id),
		zap.String("allocation", intent.Allocation.ID))

	return &controlv1.MarkInstalledResponse{AllocationId: intent.Allocation.ID}, nil
}

// SetWipeMode sets how this machine's disks are wiped; empty follows the provider's
// default. It applies to wipes ordered from now on.
func (t *Transitions) SetWipeMode(ctx context.Context, req *controlv1.SetWipeModeRequest) (*controlv1.SetWipeModeResponse, error) {
	mode := req.GetMode()
	if mode != "" && !slices.Contains(resources.WipeModes, mode) {
		return nil, status.Errorf(codes.InvalidArgument, "wipe mode %q is not one of %s (or empty for the provider's default)", mode, strings.Join(resources.WipeModes, ", "))
	}

	in, err := t.transition(ctx, "wipe-mode", req.GetMachineId(), func(spec *resources.MachineIntentSpec) error {
		spec.WipeMode = mode

		return nil
	})

	return &controlv1.SetWipeModeResponse{Intent: in}, err
}

// Cordon keeps a machine from being handed out.
func (t *Transitions) Cordon(ctx context.Context, req *controlv1.CordonRequest) (*controlv1.CordonResponse, error) {
	in, err := t.transition(ctx, "cordon", req.GetMachineId(), func(spec *resources.MachineIntentSpec) error {
		spec.Cordoned = true

		return nil
	})

	return &controlv1.CordonResponse{Intent: in}, err
}

// Uncordon lifts a cordon.
func (t *Transitions) Uncordon(ctx context.Context, req *controlv1.UncordonRequest) (*controlv1.UncordonResponse, error) {
	in, err := t.transition(ctx, "uncordon", req.GetMachineId(), func(spec *resources.MachineIntentSpec) error {
		spec.Cordoned = false

		return nil
	})

	return &controlv1.UncordonResponse{Intent: in}, err
}

// SetPower sets the desired power state.
func (t *Transitions) SetPower(ctx context.Context, req *controlv1.SetPowerRequest) (*controlv1.SetPowerResponse, error) {
	power, ok := powerFromProto[req.GetPower()]
	if !ok {
		return nil, status.Error(codes.InvalidArgument, "power must be on, off or default")
	}

	in, err := t.transition(ctx, "power", req.GetMachineId(), func(spec *resources.MachineIntentSpec) error {
		spec.Power = power

		return nil
	})

	return &controlv1.SetPowerResponse{Intent: in}, err
}

// transition checks that the machine is known, applies change to its intent (a pending
// intent when it has none) and writes the result. change returns a gRPC status error
// to refuse.
func (t *Transitions) transition(ctx context.Context, name, id string, change func(*resources.MachineIntentSpec) error, logFields ...zap.Field) (*controlv1.MachineIntent, error) {
	t.mu.Lock()
	defer t.mu.Unlock()

	if _, err := t.current(ctx, id); err != nil {
		return nil, err
	}

	intent, err := safe.StateModifyWithResult(ctx, t.st, resources.NewMachineIntent(id), func(in *resources.MachineIntent) error {
		return change(in.TypedSpec())
	})
	if err != nil {
		if errors.Is(err, errNotPending) {
			return nil, err
		}

		if st, ok := grpcStatus(err); ok {
			return nil, st.Err()
		}

		return nil, status.Errorf(codes.Internal, "error writing the intent of machine %q: %v", id, err)
	}

	// The config is never logged: it carries the cluster's secrets.
	t.logger.Info("transition", append([]zap.Field{zap.String("transition", name), zap.String("machine", id),
		zap.String("acceptance", string(intent.TypedSpec().Acceptance))}, logFields...)...)

	return intentToProto(id, intent.TypedSpec()), nil
}

// current returns the machine's intent spec (pending when it has none), or NotFound
// when no Machine resource exists.
func (t *Transitions) current(ctx context.Context, id string) (resources.MachineIntentSpec, error) {
	if err := validateMachineID(id); err != nil {
		return resources.MachineIntentSpec{}, status.Error(codes.InvalidArgument, err.Error())
	}

	if _, err := safe.StateGetByID[*resources.Machine](ctx, t.st, id); err != nil {
		if state.IsNotFoundError(err) {
			return resources.MachineIntentSpec{}, status.Errorf(codes.NotFound, "machine %q is not known", id)
		}

		return resources.MachineIntentSpec{}, status.Errorf(codes.Internal, "error reading machine %q: %v", id, err)
	}

	intent, err := safe.StateGetByID[*resources.MachineIntent](ctx, t.st, id)

	switch {
	case state.IsNotFoundError(err):
		return *resources.NewMachineIntent(id).TypedSpec(), nil
	case err != nil:
		return resources.MachineIntentSpec{}, status.Errorf(codes.Internal, "error reading the intent of machine %q: %v", id, err)
	}

	return intent.TypedSpec().DeepCopy(), nil
}

func failedPrecondition(format string, args ...any) error {
	return status.Errorf(codes.FailedPrecondition, format, args...)
}

// grpcStatus finds a gRPC status error inside err, keeping its own message: the state
// wraps what the update function returned.
func grpcStatus(err error) (*status.Status, bool) {
	var se interface{ GRPCStatus() *status.Status }

	if errors.As(err, &se) {
		return se.GRPCStatus(), true
	}

	return nil, false
}

// newID returns a random identifier for an allocation or a wipe.
func newID() string {
	var b [8]byte

	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("crypto/rand failed: %v", err)) // crypto/rand does not fail on Linux
	}

	return hex.EncodeToString(b[:])
}
