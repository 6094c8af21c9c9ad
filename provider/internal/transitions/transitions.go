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
	"fmt"
	"reflect"
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
	// DetectedExtensions merges into each local allocation the official extensions the
	// machine's hardware calls for (the extensions catalog); a request may opt out.
	DetectedExtensions bool
	// RequireTPM refuses to accept a machine without a TPM identity (--require-tpm):
	// one whose agent proved no EK, unless a person accepts it with its EK.
	RequireTPM bool
	// AutoAcceptWithoutTPM lets auto-accept accept machines whose agent proved no EK
	// (--auto-accept-without-tpm); by default it accepts only machines that did.
	AutoAcceptWithoutTPM bool
	// InstallDisk is the install disk selector of allocations that give none
	// (--install-disk); "" leaves the disk to their config.
	InstallDisk string
	Logger      *zap.Logger
	// Now stamps allocations; time.Now when nil.
	Now func() time.Time
	// Locker serializes transitions among every writer of the state — the replicas of a
	// site on etcd — beside this process's own lock (nil: this process is the only
	// writer).
	Locker Locker
}

// Locker serializes transitions across processes. Lock returns the state its holder
// writes through, fenced by the lock where it can be (a holder that lost the lock has its
// writes refused), and the unlock.
type Locker interface {
	Lock(ctx context.Context) (st state.State, unlock func(), err error)
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
	// detectedExtensions: Options.DetectedExtensions.
	detectedExtensions bool
	// requireTPM, autoAcceptWithoutTPM: Options'.
	requireTPM, autoAcceptWithoutTPM bool
	// defaultInstallDisk: Options.InstallDisk.
	defaultInstallDisk string
	logger             *zap.Logger
	now                func() time.Time

	// mu serializes transitions: each reads the machine's state, decides, then writes,
	// and two concurrent transitions on one machine must not both pass the check.
	mu sync.Mutex
	// locker serializes them with other processes' too (nil: none).
	locker Locker
}

// lock takes the transitions' lock (this process's, then the other writers') and returns
// the state to write through while it is held.
func (c *core) lock(ctx context.Context) (state.State, func(), error) {
	c.mu.Lock()

	if c.locker == nil {
		return c.st, c.mu.Unlock, nil
	}

	st, unlock, err := c.locker.Lock(ctx)
	if err != nil {
		c.mu.Unlock()

		return nil, nil, &Error{Code: CodeUnavailable, Msg: fmt.Sprintf("error taking the site's transitions lock: %v", err)}
	}

	return st, func() { unlock(); c.mu.Unlock() }, nil
}

// New returns the transitions over st.
func New(st state.State, opts Options) *Service {
	c := &core{
		st: st, recorder: opts.Recorder, schematicFor: opts.SchematicFor, detectedExtensions: opts.DetectedExtensions,
		requireTPM: opts.RequireTPM, autoAcceptWithoutTPM: opts.AutoAcceptWithoutTPM, defaultInstallDisk: opts.InstallDisk,
		logger: opts.Logger, now: opts.Now, locker: opts.Locker,
	}

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

	return &Error{Code: CodeManaged, Msg: fmt.Sprintf("%s: this provider is managed by %s, which decides it", name, s.managedBy), Manager: s.managedBy}
}

// transition checks that the machine is known, applies change to its intent (a pending
// intent when it has none) and writes the result.
func (s *Service) transition(ctx context.Context, name, id string, change func(*resources.MachineIntentSpec) error, logFields ...zap.Field) (*resources.MachineIntentSpec, error) {
	st, unlock, err := s.lock(ctx)
	if err != nil {
		return nil, err
	}

	defer unlock()

	before, err := s.current(ctx, id)
	if err != nil {
		return nil, err
	}

	var refusal error

	intent, err := safe.StateModifyWithResult(ctx, st, resources.NewMachineIntent(id), func(in *resources.MachineIntent) error {
		refusal = change(in.TypedSpec())

		return refusal
	})

	switch {
	case refusal != nil:
		return nil, refusal
	case err != nil:
		return nil, fmt.Errorf("error writing the intent of machine %q: %w", id, err)
	}

	// The config is never logged: it carries the cluster's secrets. A transition that
	// changed nothing (an owner's resync) is no news.
	level := zap.InfoLevel
	if reflect.DeepEqual(before, *intent.TypedSpec()) {
		level = zap.DebugLevel
	}

	s.logger.Log(level, "transition", append([]zap.Field{zap.String("transition", name), zap.String("machine", id),
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
