package controllers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/controller/generic"
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
		Concurrency: optional.Some(uint(concurrency)), //nolint:gosec // positive
		RunHook:     ctrl.dropOrphans,
	}
}

// MapInput implements controller.QController: every input is keyed by the machine's ID.
func (ctrl *PowerController) MapInput(_ context.Context, _ *zap.Logger, _ controller.QRuntime, ptr controller.ReducedResourceMetadata) ([]resource.Pointer, error) {
	return []resource.Pointer{resources.NewBMCConfig(ptr.ID()).Metadata()}, nil
}

// dropOrphans removes, once at start, the statuses of machines whose BMC config went
// while the provider was not running to see it.
func (ctrl *PowerController) dropOrphans(ctx context.Context, _ *zap.Logger, r controller.QRuntime) error {
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

	status := resources.PowerStatusSpec{State: resources.PowerUnknown}

	cur, err := safe.ReaderGetByID[*resources.PowerStatus](ctx, r, id)
	if err != nil && !state.IsNotFoundError(err) {
		return fmt.Errorf("error reading the power status of machine %s: %w", id, err)
	}

	if cur != nil {
		status = cur.TypedSpec().DeepCopy()
	}

	ep := endpoint(id, cfg.TypedSpec())
	status.Backend, status.Endpoint = cfg.TypedSpec().Kind, ep.String()
	status.Desired = m.DesiredPower(ctrl.Policy)

	if ep.Backend != power.BackendNone && status.Desired != "" && cfg.TypedSpec().HasPassword {
		if ep.Password, err = ctrl.password(ctx, r, id); err != nil {
			return err
		}
	}

	wake := ctrl.drive(ctx, logger, m, ep, &status)

	if err = safe.WriterModify(ctx, r, resources.NewPowerStatus(id), func(ps *resources.PowerStatus) error {
		*ps.TypedSpec() = status

		return nil
	}); err != nil {
		return fmt.Errorf("error writing the power status of machine %s: %w", id, err)
	}

	if wake.IsZero() {
		return nil
	}

	return controller.NewRequeueInterval(max(ctrl.clock().Until(wake), time.Millisecond))
}

// drive reads the machine's BMC and acts on it as its state wants, recording both on
// status; it returns when the machine wants looking at again (zero: only on an event).
func (ctrl *PowerController) drive(ctx context.Context, logger *zap.Logger, m lifecycle.Machine, ep power.Endpoint, status *resources.PowerStatusSpec) time.Time {
	switch {
	case ep.Backend == power.BackendNone:
		status.Condition, status.Error = conditionManual, ""

		return time.Time{}
	case status.Desired == "":
		// Pending or rejected: hands off, and say so.
		status.Condition, status.Error = conditionHandsOff, ""

		return time.Time{}
	}

	now := ctrl.clock().Now()
	reboot := m.RebootWanted(status.RebootID)

	if retry := retryAt(*status); now.Before(retry) {
		return retry
	}

	if readDue(*status, reboot, now, ctrl.pollInterval()) {
		state, err := ctrl.read(ctx, ep)
		status.ObservedAt = now

		if err != nil {
			failed(status, err)
			logger.Warn("error reading the power state", zap.Stringer("bmc", ep), zap.Error(err))

			return retryAt(*status)
		}

		succeeded(status)
		status.State = state
	}

	action := nextAction(status.Desired, status.State, reboot, status.LastActionAt, now, ctrl.MinActionInterval)
	if action == actionNone {
		return ctrl.nextWake(*status, reboot, now)
	}

	err := ctrl.act(ctx, ep, action)
	status.LastAction, status.LastActionAt = action, now

	if action == actionReboot {
		status.RebootID = m.Intent.RebootID
	}

	if err != nil {
		failed(status, err)
		logger.Warn("power action failed", zap.String("action", action), zap.Stringer("bmc", ep), zap.Error(err))

		return retryAt(*status)
	}

	succeeded(status)
	logger.Info("power action", zap.String("action", action), zap.Stringer("bmc", ep))

	// Read again shortly rather than guess.
	status.State, status.ObservedAt = resources.PowerUnknown, time.Time{}

	return now.Add(min(settleAfter, ctrl.pollInterval()))
}

// readDue says whether the BMC should be read now: never read, read too long ago, or
// not (yet) where the machine's state wants it.
func readDue(s resources.PowerStatusSpec, reboot bool, now time.Time, poll time.Duration) bool {
	return s.ObservedAt.IsZero() || now.Sub(s.ObservedAt) >= poll || s.State != s.Desired || reboot
}

// nextAction is what to do to a machine now, given what is wanted and seen; a reboot
// request wins over the rest, and nothing happens within minInterval of the last action.
func nextAction(desired, observed resources.PowerState, rebootWanted bool, last, now time.Time, minInterval time.Duration) string {
	if desired == "" || (!last.IsZero() && now.Sub(last) < minInterval) {
		return actionNone
	}

	switch {
	case rebootWanted:
		return actionReboot
	case desired == resources.PowerOn && observed == resources.PowerOff:
		return actionOn
	case desired == resources.PowerOff && observed == resources.PowerOn:
		return actionOff
	}

	return actionNone
}

// nextWake is when a machine with nothing to do now wants looking at again: its next
// poll, or sooner the end of the rate limit that holds back an action it wants.
func (ctrl *PowerController) nextWake(s resources.PowerStatusSpec, reboot bool, now time.Time) time.Time {
	wake := s.ObservedAt.Add(ctrl.pollInterval())

	held := !s.LastActionAt.IsZero() && now.Sub(s.LastActionAt) < ctrl.MinActionInterval
	wants := reboot || (s.State != s.Desired && s.State != resources.PowerUnknown)

	if held && wants {
		if end := s.LastActionAt.Add(ctrl.MinActionInterval); end.Before(wake) {
			wake = end
		}
	}

	return wake
}

// retryAt is when a failing BMC may be tried again: the last attempt, plus a wait that
// doubles with each failure in a row. Zero when it is not failing.
func retryAt(s resources.PowerStatusSpec) time.Time {
	if s.Failures == 0 {
		return time.Time{}
	}

	last := s.ObservedAt
	if s.LastActionAt.After(last) {
		last = s.LastActionAt
	}

	return last.Add(min(backoffBase<<min(s.Failures, 10), backoffMax))
}

// failed records a BMC failure on the status.
func failed(s *resources.PowerStatusSpec, err error) {
	s.Failures++
	s.Error = err.Error()
	s.State = resources.PowerUnknown

	switch {
	case errors.Is(err, power.ErrUnauthorized):
		s.Condition = conditionUnauthorized
	case errors.Is(err, power.ErrUnreachable):
		s.Condition = conditionUnreachable
	case errors.Is(err, power.ErrUnsupported):
		s.Condition = conditionUnsupported
	default:
		s.Condition = conditionError
	}
}

func succeeded(s *resources.PowerStatusSpec) {
	s.Failures, s.Error, s.Condition = 0, "", conditionOK
}

// read reads the BMC's power state within the per-call timeout.
func (ctrl *PowerController) read(ctx context.Context, ep power.Endpoint) (resources.PowerState, error) {
	ctx, cancel := context.WithTimeout(ctx, ctrl.timeout())
	defer cancel()

	c, err := ctrl.Dialers.Dial(ctx, ep)
	if err != nil {
		return resources.PowerUnknown, err
	}
	defer c.Close() //nolint:errcheck // a session that fails to close changes nothing read

	on, err := c.PowerState(ctx)
	if err != nil {
		return resources.PowerUnknown, fmt.Errorf("error reading the power state: %w", err)
	}

	if on {
		return resources.PowerOn, nil
	}

	return resources.PowerOff, nil
}

// act carries out the action; each BMC call gets the per-call timeout (a PXE override and
// a power-on are two calls).
func (ctrl *PowerController) act(ctx context.Context, ep power.Endpoint, action string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*ctrl.timeout())
	defer cancel()

	c, err := ctrl.Dialers.Dial(ctx, ep)
	if err != nil {
		return err
	}
	defer c.Close() //nolint:errcheck // the action is done or failed already

	switch action {
	case actionOff:
		return c.PowerOff(ctx)
	case actionOn, actionReboot:
		// The provider decides what the machine boots: PXE first, whatever the disk holds.
		if err := c.SetPXEOnce(ctx, ctrl.BootMode); err != nil && !errors.Is(err, power.ErrUnsupported) {
			return fmt.Errorf("error setting the next boot to PXE: %w", err)
		}

		if action == actionOn {
			return c.PowerOn(ctx)
		}

		return c.PowerCycle(ctx)
	}

	return nil
}

func (ctrl *PowerController) password(ctx context.Context, r controller.Reader, id string) (string, error) {
	secret, err := safe.ReaderGetByID[*resources.BMCSecret](ctx, r, id)

	switch {
	case state.IsNotFoundError(err):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("error reading the BMC secret of machine %s: %w", id, err)
	}

	return secret.TypedSpec().Password, nil
}

// endpoint is how the machine's BMC is reached, without its password.
func endpoint(id string, cfg *resources.BMCConfigSpec) power.Endpoint {
	kind := power.Backend(cfg.Kind)
	if kind == "" {
		kind = power.BackendNone
	}

	return power.Endpoint{
		Backend: kind, Address: cfg.Address, Port: int(cfg.Port), Username: cfg.Username,
		Insecure: cfg.Insecure, SystemID: cfg.SystemID, MachineUUID: id,
	}
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

// optionalSpec reads the spec of the machine's resource of type R, nil when there is none.
func optionalSpec[S any, R interface {
	generic.ResourceWithRD
	TypedSpec() *S
}](ctx context.Context, r controller.Reader, id string) (*S, error) {
	res, err := safe.ReaderGetByID[R](ctx, r, id)

	switch {
	case state.IsNotFoundError(err):
		return nil, nil //nolint:nilnil // absent is an answer
	case err != nil:
		var zero R

		return nil, fmt.Errorf("error reading %s of machine %s: %w", zero.ResourceDefinition().Type, id, err)
	}

	return res.TypedSpec(), nil
}
