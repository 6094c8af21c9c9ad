package controllers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"go.uber.org/zap"

	"github.com/anvil-metal/anvil/provider/internal/power"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// Power defaults.
const (
	DefaultPowerPollInterval      = 30 * time.Second
	DefaultPowerMinActionInterval = 2 * time.Minute
	// powerTick is how often due work is looked for between events: polls and actions
	// held back by the rate limit.
	powerTick = 2 * time.Second
	// powerBackoffMax caps the wait before a failing BMC is tried again.
	powerBackoffMax = 5 * time.Minute
)

// Power actions.
const (
	actionNone   = ""
	actionOn     = "pxe+on"    // boot once from the network, then power on
	actionOff    = "off"       // hard power off
	actionReboot = "pxe+cycle" // boot once from the network, then power cycle
)

// PowerController produces PowerStatus: it reads the power of every accepted machine that
// has a BMC, and drives it to what the machine's state wants (DesiredPower), carrying out
// reboot requests (PXE once, then a cycle). Pending and rejected machines are never
// touched — not even read. A BMC that fails becomes the machine's status, tried again
// with backoff.
type PowerController struct {
	Dialers power.Dialers
	// IdleDefault is the power of an accepted machine with nothing to do (off unless set).
	IdleDefault resources.PowerState
	// PollInterval is how often each BMC is read.
	PollInterval time.Duration
	// MinActionInterval is the least time between two power actions on one machine.
	MinActionInterval time.Duration
	// BootMode is the firmware flavour of the PXE-once override.
	BootMode power.BootMode
	// Sweep bounds the reads and actions (concurrency, per-BMC timeout).
	Sweep power.SweepOptions

	mu      sync.Mutex
	backoff map[string]time.Time // machine → not before
}

// Name implements controller.Controller.
func (ctrl *PowerController) Name() string { return "PowerController" }

// Inputs implements controller.Controller.
func (ctrl *PowerController) Inputs() []controller.Input {
	return []controller.Input{
		{Namespace: resources.NamespaceName, Type: resources.BMCConfigType, Kind: controller.InputWeak},
		{Namespace: resources.NamespaceName, Type: resources.BMCSecretType, Kind: controller.InputWeak},
		{Namespace: resources.NamespaceName, Type: resources.MachineIntentType, Kind: controller.InputWeak},
		{Namespace: resources.NamespaceName, Type: resources.MachineStatusType, Kind: controller.InputWeak},
	}
}

// Outputs implements controller.Controller.
func (ctrl *PowerController) Outputs() []controller.Output {
	return []controller.Output{{Type: resources.PowerStatusType, Kind: controller.OutputExclusive}}
}

// DesiredPower is the power a machine's state wants: "" (hands off) unless it is
// accepted; then the user's override, on while allocated or while a wipe is owed (its
// agent must run to wipe), else idle.
func DesiredPower(intent resources.MachineIntentSpec, status *resources.MachineStatusSpec, idle resources.PowerState) resources.PowerState {
	if intent.Acceptance != resources.AcceptanceAccepted {
		return ""
	}

	if intent.Power == resources.PowerOn || intent.Power == resources.PowerOff {
		return intent.Power
	}

	wiped := ""
	if status != nil {
		wiped = status.WipedID
	}

	if intent.Allocation != nil || (intent.WipeID != "" && intent.WipeID != wiped) {
		return resources.PowerOn
	}

	if idle == resources.PowerOn {
		return resources.PowerOn
	}

	return resources.PowerOff
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

// Run implements controller.Controller.
func (ctrl *PowerController) Run(ctx context.Context, r controller.Runtime, logger *zap.Logger) error {
	tick := time.NewTicker(powerTick)
	defer tick.Stop()

	for {
		if err := ctrl.reconcile(ctx, r, logger, time.Now()); err != nil {
			return err
		}

		select {
		case <-ctx.Done():
			return nil
		case <-r.EventCh():
		case <-tick.C:
		}
	}
}

// powerTarget is one machine with a BMC, and what was last recorded of it.
type powerTarget struct {
	id       string
	endpoint power.Endpoint
	desired  resources.PowerState
	rebootID string // wanted
	status   resources.PowerStatusSpec
	due      bool // a read is due
}

func (ctrl *PowerController) reconcile(ctx context.Context, r controller.Runtime, logger *zap.Logger, now time.Time) error {
	targets, err := ctrl.targets(ctx, r, now)
	if err != nil {
		return err
	}

	r.StartTrackingOutputs()

	// Read the BMCs that are due, all at once within the sweep's bounds.
	var (
		reads []power.Target
		index = map[string]*powerTarget{}
	)

	for _, t := range targets {
		index[t.id] = t

		if t.desired != "" && t.due && ctrl.ready(t.id, now) {
			reads = append(reads, power.Target{ID: t.id, Endpoint: t.endpoint})
		}
	}

	for _, obs := range power.Sweep(ctx, reads, ctrl.Dialers, ctrl.Sweep) {
		t := index[obs.ID]
		t.status.ObservedAt = now

		if obs.Err != nil {
			ctrl.failed(t, obs.Err, now)
			logger.Warn("error reading the power state", zap.String("machine", t.id), zap.Stringer("bmc", t.endpoint), zap.Error(obs.Err))

			continue
		}

		ctrl.succeeded(t)
		t.status.State = toPowerState(obs.State)
	}

	// Act where the state wants it, bounded like the reads.
	var acts []*powerTarget

	for _, t := range targets {
		if t.desired == "" || t.status.Condition != "ok" || !ctrl.ready(t.id, now) {
			continue
		}

		if nextAction(t.desired, t.status.State, t.rebootID != "" && t.rebootID != t.status.RebootID, t.status.LastActionAt, now, ctrl.MinActionInterval) != actionNone {
			acts = append(acts, t)
		}
	}

	ctrl.act(ctx, acts, logger, now)

	for _, t := range targets {
		spec := t.status
		if err := safe.WriterModify(ctx, r, resources.NewPowerStatus(t.id), func(ps *resources.PowerStatus) error {
			*ps.TypedSpec() = spec

			return nil
		}); err != nil {
			return fmt.Errorf("error writing the power status of machine %s: %w", t.id, err)
		}
	}

	if err := r.CleanupOutputs(ctx, resources.NewPowerStatus("").Metadata()); err != nil {
		return fmt.Errorf("error cleaning up power statuses: %w", err)
	}

	return nil
}

// targets lists every machine with a BMC config, with what its state wants.
func (ctrl *PowerController) targets(ctx context.Context, r controller.Runtime, now time.Time) ([]*powerTarget, error) {
	bmcs, err := safe.ReaderListAll[*resources.BMCConfig](ctx, r)
	if err != nil {
		return nil, fmt.Errorf("error listing BMC configs: %w", err)
	}

	var out []*powerTarget

	for bmc := range bmcs.All() {
		id := bmc.Metadata().ID()
		cfg := bmc.TypedSpec()

		t := &powerTarget{id: id, status: resources.PowerStatusSpec{State: resources.PowerUnknown}}

		current, err := safe.ReaderGetByID[*resources.PowerStatus](ctx, r, id)
		if err != nil && !state.IsNotFoundError(err) {
			return nil, fmt.Errorf("error reading the power status of machine %s: %w", id, err)
		}

		if current != nil {
			t.status = current.TypedSpec().DeepCopy()
		}

		t.endpoint = power.Endpoint{
			Kind: power.Kind(cfg.Kind), Address: cfg.Address, Port: int(cfg.Port), Username: cfg.Username,
			Insecure: cfg.Insecure, SystemID: cfg.SystemID, MachineUUID: id,
		}
		t.status.Backend, t.status.Endpoint = cfg.Kind, t.endpoint.String()

		intent, err := safe.ReaderGetByID[*resources.MachineIntent](ctx, r, id)
		if err != nil && !state.IsNotFoundError(err) {
			return nil, fmt.Errorf("error reading the intent of machine %s: %w", id, err)
		}

		if intent == nil || t.endpoint.Kind == power.KindNone {
			t.desired = ""
		} else {
			status, err := safe.ReaderGetByID[*resources.MachineStatus](ctx, r, id)
			if err != nil && !state.IsNotFoundError(err) {
				return nil, fmt.Errorf("error reading the status of machine %s: %w", id, err)
			}

			var ss *resources.MachineStatusSpec
			if status != nil {
				ss = status.TypedSpec()
			}

			t.desired = DesiredPower(*intent.TypedSpec(), ss, ctrl.IdleDefault)
			t.rebootID = intent.TypedSpec().RebootID
		}

		t.status.Desired = t.desired

		switch {
		case t.endpoint.Kind == power.KindNone:
			t.status.Condition, t.status.Error = "manual", ""
		case t.desired == "":
			// Pending or rejected: hands off, and say so.
			t.status.Condition, t.status.Error = "hands-off", ""
		default:
			if cfg.HasPassword {
				secret, err := safe.ReaderGetByID[*resources.BMCSecret](ctx, r, id)
				if err != nil && !state.IsNotFoundError(err) {
					return nil, fmt.Errorf("error reading the BMC secret of machine %s: %w", id, err)
				}

				if secret != nil {
					t.endpoint.Password = secret.TypedSpec().Password
				}
			}

			t.due = t.status.ObservedAt.IsZero() || now.Sub(t.status.ObservedAt) >= ctrl.PollInterval ||
				t.status.State != t.desired || (t.rebootID != "" && t.rebootID != t.status.RebootID)
		}

		out = append(out, t)
	}

	return out, nil
}

// act carries out each target's next action, bounded like a sweep.
func (ctrl *PowerController) act(ctx context.Context, targets []*powerTarget, logger *zap.Logger, now time.Time) {
	limit := ctrl.Sweep.Concurrency
	if limit <= 0 {
		limit = power.DefaultSweepConcurrency
	}

	timeout := ctrl.Sweep.Timeout
	if timeout <= 0 {
		timeout = power.DefaultSweepTimeout
	}

	sem := make(chan struct{}, limit)

	var wg sync.WaitGroup

	for _, t := range targets {
		wg.Add(1)

		sem <- struct{}{}

		go func() {
			defer func() { <-sem; wg.Done() }()

			action := nextAction(t.desired, t.status.State, t.rebootID != "" && t.rebootID != t.status.RebootID, t.status.LastActionAt, now, ctrl.MinActionInterval)

			// Each step gets the per-BMC timeout: a PXE override and a power-on are two calls.
			actx, cancel := context.WithTimeout(ctx, 2*timeout)
			defer cancel()

			err := ctrl.do(actx, t.endpoint, action)

			t.status.LastAction, t.status.LastActionAt = action, now
			if action == actionReboot {
				t.status.RebootID = t.rebootID
			}

			if err != nil {
				ctrl.failed(t, err, now)
				logger.Warn("power action failed", zap.String("machine", t.id), zap.String("action", action), zap.Stringer("bmc", t.endpoint), zap.Error(err))

				return
			}

			ctrl.succeeded(t)

			// Read again on the next round rather than guess.
			t.status.State, t.status.ObservedAt = resources.PowerUnknown, time.Time{}
			logger.Info("power action", zap.String("machine", t.id), zap.String("action", action), zap.Stringer("bmc", t.endpoint))
		}()
	}

	wg.Wait()
}

func (ctrl *PowerController) do(ctx context.Context, ep power.Endpoint, action string) error {
	c, err := ctrl.Dialers.Dial(ctx, ep)
	if err != nil {
		return err
	}
	defer c.Close() //nolint:errcheck

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

// failed records a BMC failure on the target and backs off before the next try.
func (ctrl *PowerController) failed(t *powerTarget, err error, now time.Time) {
	t.status.Failures++
	t.status.Error = err.Error()
	t.status.State = resources.PowerUnknown

	switch {
	case errors.Is(err, power.ErrUnauthorized):
		t.status.Condition = "unauthorized"
	case errors.Is(err, power.ErrUnreachable):
		t.status.Condition = "unreachable"
	case errors.Is(err, power.ErrUnsupported):
		t.status.Condition = "unsupported"
	default:
		t.status.Condition = "error"
	}

	wait := min(powerTick<<min(t.status.Failures, 10), powerBackoffMax)

	ctrl.mu.Lock()
	defer ctrl.mu.Unlock()

	if ctrl.backoff == nil {
		ctrl.backoff = map[string]time.Time{}
	}

	ctrl.backoff[t.id] = now.Add(wait)
}

func (ctrl *PowerController) succeeded(t *powerTarget) {
	t.status.Failures, t.status.Error, t.status.Condition = 0, "", "ok"

	ctrl.mu.Lock()
	defer ctrl.mu.Unlock()

	delete(ctrl.backoff, t.id)
}

// ready says whether the machine's BMC may be tried now (no backoff pending).
func (ctrl *PowerController) ready(id string, now time.Time) bool {
	ctrl.mu.Lock()
	defer ctrl.mu.Unlock()

	return !now.Before(ctrl.backoff[id])
}

func toPowerState(s power.State) resources.PowerState {
	switch s {
	case power.StateOn:
		return resources.PowerOn
	case power.StateOff:
		return resources.PowerOff
	default:
		return resources.PowerUnknown
	}
}
