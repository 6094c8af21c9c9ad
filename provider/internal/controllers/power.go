package controllers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/gen/optional"
	"go.uber.org/zap"

	"github.com/anvil-metal/anvil/provider/internal/lifecycle"
	"github.com/anvil-metal/anvil/provider/internal/power"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// Power actions, as PowerStatus records them.
const (
	actionNone   = ""
	actionOn     = "pxe+on"    // boot once from the network, then power on
	actionOff    = "off"       // hard power off
	actionReboot = "pxe+cycle" // boot once from the network, then power cycle
)

// Power conditions, as PowerStatus records them.
const (
	conditionOK           = "ok"
	conditionManual       = "manual"
	conditionHandsOff     = "hands-off"
	conditionUnreachable  = "unreachable"
	conditionUnauthorized = "unauthorized"
	conditionUnsupported  = "unsupported"
	conditionError        = "error"
)

// Retry timing of a failing BMC, and the pause before reading the power again after an
// action (a BMC may report the old state for a moment).
const (
	backoffBase = 2 * time.Second
	backoffMax  = 5 * time.Minute
	settleAfter = 2 * time.Second

	// heldBackRetry is how soon a machine whose BMC call MayAct held back is looked at
	// again.
	heldBackRetry = time.Second

	// backoffJitter spreads a retry by up to ±1/backoffJitter of its wait (±20%).
	backoffJitter = 5
)

// PowerController produces PowerStatus: for each machine with a BMC config it reads the
// BMC's power and drives it to what the lifecycle wants (DesiredPower), carrying out
// reboot requests (PXE once, then a cycle). Pending and rejected machines are never
// touched — not even read. A BMC that fails becomes the machine's status, tried again
// with backoff.
//
// It is a queue controller: one machine per reconcile, at most Concurrency at once (the
// one bounded pool of BMC calls), each requeued for its next poll, retry or held-back
// action; an event on any of a machine's resources brings it forward.
//
// It may be stopped at any moment, and another (a restart, a new leader) take over from
// the state alone, so:
//   - An action is stored in PowerStatus (LastAction, LastActionAt, and the RebootID or
//     HandoffRebootID it serves) before the BMC is asked for it, its result after. A
//     controller that finds an action stored holds back for MinActionInterval, and never
//     carries out a reboot request it finds served: a reboot is done at most once, while
//     power on and off (the same again at the BMC) are done again after
//     MinActionInterval if the power still reads otherwise.
//   - PowerStatus is written when what it records changes, not on every poll: the poll
//     times are kept in memory, and ObservedAt is stored with a change or, while nothing
//     changes, once every observedRefresh.
//   - Each machine is polled at its own phase of the poll interval, so a controller that
//     starts spreads its first reads over the interval that follows; a machine with an
//     action to decide (a reboot wanted, its power not known to be as wanted) is read at
//     once.
//   - MayAct is asked before every BMC read and before an action is recorded; a recorded
//     action is taken (it was recorded through the fence, while this replica led).
type PowerController struct {
	Dialers power.Dialers
	// Policy is the operator's choice of idle power and in-band BMC provisioning.
	Policy lifecycle.Policy
	// PollInterval is how often each BMC is read (0: power.DefaultPollInterval).
	PollInterval time.Duration
	// MinActionInterval is the least time between two power actions on one machine.
	MinActionInterval time.Duration
	// BootMode is the firmware flavour of the PXE-once override.
	BootMode power.BootMode
	// Concurrency is the most BMCs talked to at once (0: power.DefaultConcurrency).
	Concurrency int
	// Timeout bounds each BMC call (0: power.DefaultTimeout).
	Timeout time.Duration
	// Clock tells the time; the real one when nil.
	Clock Clock
	// MayAct is asked before every BMC read and before an action is recorded (then the
	// action is taken: see take): an error holds the call back and looks at the machine
	// again shortly, writing nothing more (nil: always allowed). Under high availability it says that
	// this replica leads, and that its lease was renewed recently enough not to have
	// expired by the time the call is made.
	MayAct func() error

	polls pollSchedule
}

// Clock is the time as the controller sees it: now, and how long until a moment (the
// wait before a machine's next reconcile).
type Clock interface {
	Now() time.Time
	Until(t time.Time) time.Duration
}

type realClock struct{}

func (realClock) Now() time.Time                  { return time.Now() }
func (realClock) Until(t time.Time) time.Duration { return time.Until(t) }

// Name implements controller.QController.
func (ctrl *PowerController) Name() string { return "PowerController" }

// Settings implements controller.QController.
func (ctrl *PowerController) Settings() controller.QSettings {
	concurrency := ctrl.Concurrency
	if concurrency <= 0 {
		concurrency = power.DefaultConcurrency
	}

	return controller.QSettings{
		Inputs: []controller.Input{
			{Namespace: resources.NamespaceName, Type: resources.BMCConfigType, Kind: controller.InputQPrimary},
			{Namespace: resources.NamespaceName, Type: resources.BMCSecretType, Kind: controller.InputQMapped},
			{Namespace: resources.NamespaceName, Type: resources.MachineIntentType, Kind: controller.InputQMapped},
			{Namespace: resources.NamespaceName, Type: resources.MachineStatusType, Kind: controller.InputQMapped},
		},
		Outputs:     []controller.Output{{Type: resources.PowerStatusType, Kind: controller.OutputExclusive}},
		Concurrency: optional.Some(uint(concurrency)), // positive
		RunHook:     ctrl.start,
	}
}

// MapInput implements controller.QController: every input is keyed by the machine's ID.
func (ctrl *PowerController) MapInput(_ context.Context, _ *zap.Logger, _ controller.QRuntime, ptr controller.ReducedResourceMetadata) ([]resource.Pointer, error) {
	return []resource.Pointer{resources.NewBMCConfig(ptr.ID()).Metadata()}, nil
}

// start runs as the controller starts, before any reconcile: poll times from before are
// forgotten, and the statuses of machines whose BMC config went while the controller
// was not running to see it are removed.
func (ctrl *PowerController) start(ctx context.Context, _ *zap.Logger, r controller.QRuntime) error {
	ctrl.polls.reset(ctrl.clock().Now())

	return ctrl.dropOrphans(ctx, r)
}

// dropOrphans removes the statuses of machines whose BMC config is gone.
func (ctrl *PowerController) dropOrphans(ctx context.Context, r controller.QRuntime) error {
	statuses, err := safe.ReaderListAll[*resources.PowerStatus](ctx, r)
	if err != nil {
		return fmt.Errorf("error listing power statuses: %w", err)
	}

	for ps := range statuses.All() {
		cfg, err := safe.ReaderGetByID[*resources.BMCConfig](ctx, r, ps.Metadata().ID())
		if err != nil && !state.IsNotFoundError(err) {
			return fmt.Errorf("error reading the BMC config of machine %s: %w", ps.Metadata().ID(), err)
		}

		if cfg == nil {
			if err = r.Destroy(ctx, ps.Metadata()); err != nil && !state.IsNotFoundError(err) {
				return fmt.Errorf("error removing the power status of machine %s: %w", ps.Metadata().ID(), err)
			}
		}
	}

	return nil
}

// Reconcile implements controller.QController.
func (ctrl *PowerController) Reconcile(ctx context.Context, logger *zap.Logger, r controller.QRuntime, ptr resource.Pointer) error {
	id := ptr.ID()

	cfg, err := safe.ReaderGetByID[*resources.BMCConfig](ctx, r, id)
	if err != nil && !state.IsNotFoundError(err) {
		return fmt.Errorf("error reading the BMC config of machine %s: %w", id, err)
	}

	if cfg == nil || cfg.Metadata().Phase() == resource.PhaseTearingDown {
		if err = r.Destroy(ctx, resources.NewPowerStatus(id).Metadata()); err != nil && !state.IsNotFoundError(err) {
			return fmt.Errorf("error removing the power status of machine %s: %w", id, err)
		}

		ctrl.polls.forget(id)

		return nil
	}

	// What the lifecycle reads for power: the machine's intent and status (its Machine,
	// which changes with every boot, is not an input).
	m := lifecycle.Machine{ID: id, BMC: cfg.TypedSpec()}

	if m.Intent, err = optionalSpec[resources.MachineIntentSpec, *resources.MachineIntent](ctx, r, id); err != nil {
		return err
	}

	if m.Status, err = optionalSpec[resources.MachineStatusSpec, *resources.MachineStatus](ctx, r, id); err != nil {
		return err
	}

	cur, err := safe.ReaderGetByID[*resources.PowerStatus](ctx, r, id)
	if err != nil && !state.IsNotFoundError(err) {
		return fmt.Errorf("error reading the power status of machine %s: %w", id, err)
	}

	status := resources.PowerStatusSpec{State: resources.PowerUnknown}

	var stored *resources.PowerStatusSpec // nil: none yet

	if cur != nil {
		status = cur.TypedSpec().DeepCopy()
		stored = new(cur.TypedSpec().DeepCopy())
	}

	ep := endpoint(id, cfg.TypedSpec())
	status.Backend, status.Endpoint = cfg.TypedSpec().Kind, ep.String()
	status.Desired = m.DesiredPowerAt(ctrl.Policy, ctrl.clock().Now())

	if ep.Backend != power.BackendNone && status.Desired != "" && cfg.TypedSpec().HasPassword {
		if ep.Password, err = ctrl.password(ctx, r, id); err != nil {
			return err
		}
	}

	record := recorder(ctx, r, id, stored)

	wake, err := ctrl.drive(ctx, logger, m, ep, &status, record)

	switch {
	case errors.Is(err, errHeldBack):
		logger.Debug("BMC call held back", zap.Error(err))

		return ctrl.requeue(ctrl.clock().Now().Add(heldBackRetry))
	case err != nil:
		return err
	}

	if err = record(status); err != nil {
		return err
	}

	if wake.IsZero() {
		return nil
	}

	return ctrl.requeue(wake)
}

// drive reads the machine's BMC and acts on it as its state wants, recording both on
// status; an action is stored with record before the BMC is asked for it. It returns
// when the machine wants looking at again (zero: only on an event), or errHeldBack when
// MayAct held back a BMC call.
func (ctrl *PowerController) drive(
	ctx context.Context, logger *zap.Logger, m lifecycle.Machine, ep power.Endpoint, status *resources.PowerStatusSpec, record func(resources.PowerStatusSpec) error,
) (time.Time, error) {
	switch {
	case ep.Backend == power.BackendNone:
		status.Condition, status.Error = conditionManual, ""

		return time.Time{}, nil
	case status.Desired == "":
		// Pending or rejected: hands off, and say so.
		status.Condition, status.Error = conditionHandsOff, ""

		return time.Time{}, nil
	}

	now := ctrl.clock().Now()
	reboot := m.RebootWanted(status.RebootID)

	// A kexec handoff that failed, or whose Talos was not seen up in time, falls back to
	// booting the machine through its firmware: PXE once, then a cycle.
	fallback, why := m.HandoffFallback(ctrl.Policy, now)
	fallbackDue := fallback != "" && fallback != status.HandoffRebootID
	reboot = reboot || fallbackDue

	if retry := retryAt(m.ID, *status); now.Before(retry) {
		return retry, nil
	}

	poll := ctrl.polls.due(m.ID, now, ctrl.pollInterval())

	if readDue(*status, reboot, now, poll) {
		state, err := ctrl.read(ctx, ep)
		if errors.Is(err, errHeldBack) {
			return time.Time{}, err
		}

		status.ObservedAt, poll = now, ctrl.polls.read(m.ID, now, ctrl.pollInterval())

		if err != nil {
			failed(status, err)
			logger.Warn("error reading the power state", zap.Stringer("bmc", ep), zap.Error(err))

			return retryAt(m.ID, *status), nil
		}

		succeeded(status)
		status.State = state
	}

	action := nextAction(status.Desired, status.State, reboot, status.LastActionAt, now, ctrl.MinActionInterval)
	if action == actionNone {
		wake := ctrl.nextWake(*status, reboot, now, poll)

		// Look again when a pending handoff is given up, or the keep-warm window ends.
		for _, at := range []time.Time{m.HandoffDeadline(ctrl.Policy), m.WarmUntil(ctrl.Policy)} {
			if !at.IsZero() && at.After(now) && at.Before(wake) {
				wake = at
			}
		}

		return wake, nil
	}

	// Nothing is recorded of an action the BMC may not be asked for.
	if err := ctrl.mayAct(); err != nil {
		return time.Time{}, err
	}

	// The action, and the reboot requests it serves: served once recorded, whatever
	// becomes of it.
	status.LastAction, status.LastActionAt, status.LastActionReason = action, now, ""

	if action == actionReboot {
		status.RebootID = m.Intent.RebootID

		if fallbackDue {
			status.HandoffRebootID, status.LastActionReason = fallback, why
			logger.Warn("kexec handoff failed: booting through the firmware", zap.String("reason", why))
		}
	}

	return ctrl.take(ctx, logger, m.ID, ep, status, record)
}

// requeue looks at the machine again at a moment.
func (ctrl *PowerController) requeue(at time.Time) error {
	return controller.NewRequeueInterval(max(ctrl.clock().Until(at), time.Millisecond))
}

func (ctrl *PowerController) clock() Clock {
	if ctrl.Clock == nil {
		return realClock{}
	}

	return ctrl.Clock
}

func (ctrl *PowerController) pollInterval() time.Duration {
	if ctrl.PollInterval <= 0 {
		return power.DefaultPollInterval
	}

	return ctrl.PollInterval
}

func (ctrl *PowerController) timeout() time.Duration {
	if ctrl.Timeout <= 0 {
		return power.DefaultTimeout
	}

	return ctrl.Timeout
}
