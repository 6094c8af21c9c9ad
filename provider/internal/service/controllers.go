package service

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/controller/runtime"
	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/state"
	factoryclient "github.com/siderolabs/image-factory/pkg/client"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/anvil-metal/anvil/internal/disksel"
	"github.com/anvil-metal/anvil/provider/internal/controllers"
	"github.com/anvil-metal/anvil/provider/internal/power"
)

// Restart backoff of the controller runtime.
const (
	controllersRestartMin = time.Second
	controllersRestartMax = time.Minute
	overrunRestart        = 100 * time.Millisecond
)

// controllers builds the provider's controllers (controller.Controller or
// controller.QController values): local ones, which every replica of a site runs to
// record what it sees, and those that act on the world, which the leader alone runs.
func (env *environment) controllers(factory *factoryclient.Client, labels map[string]string, autoAccept bool, selector resource.LabelQuery) (local, leading []any, err error) {
	if env.opts.MaxPendingMachines < 1 {
		return nil, nil, fmt.Errorf("--max-pending-machines must be at least 1, not %d", env.opts.MaxPendingMachines)
	}

	powerCtrl, err := newPowerController(env.opts, env.policy, power.NewMetrics(env.registry))
	if err != nil {
		return nil, nil, err
	}

	installDisk, err := disksel.Parse(env.opts.InstallDisk)
	if err != nil {
		return nil, nil, fmt.Errorf("--install-disk: %w", err)
	}

	if env.site != nil {
		// A BMC cannot check who leads: the leader stops calling them before its lease
		// can have expired.
		powerCtrl.MayAct = env.site.mayAct
	}

	env.machines = &controllers.MachineController{
		Observations: env.observations, Labels: labels, AgentBoots: env.view.AgentBootIssued, MaxPending: env.opts.MaxPendingMachines,
	}

	local = []any{env.machines, env.status, env.inventory}

	leading = []any{
		powerCtrl,
		&controllers.SchematicController{Factory: factory, SchematicFor: env.scripts.Schematic},
		&controllers.MachineLabelsController{Static: labels, InstallDisk: installDisk},
	}

	if autoAccept {
		leading = append(leading, &controllers.AutoAcceptController{
			Acceptor: env.transitions, Selector: selector, Description: strings.TrimSpace(env.opts.AutoAccept),
		})
	}

	if env.omni != nil {
		// Omni mode: Omni's decisions, as the adapter reports them, become the machines'
		// intents through the owner's view of the transitions (the local view refuses them).
		leading = append(leading,
			&controllers.OmniIntentController{Applier: env.transitions.Owner(), Recorder: env.status, Sync: env.omniLag},
			&controllers.OmniMachineStatusController{Policy: env.policy, Sync: env.omniLag},
		)
	}

	return local, leading, nil
}

// runControllers runs the controllers until ctx is done. The controller runtime stops
// when one of its watches fails: that must not take the provider down, so the runtime is
// built again and the controllers, whose state is all in resources, carry on. A watch
// overrun (a burst of writes outran the state's event history) is over by the time it is
// reported: the runtime starts again at once; any other failure backs off.
func runControllers(ctx context.Context, st state.State, ctrls []any, logger *zap.Logger) error {
	wait := controllersRestartMin

	for {
		started := time.Now()

		err := runControllersOnce(ctx, st, ctrls, logger)
		if ctx.Err() != nil {
			return nil //nolint:nilerr // stopping is not a failure
		}

		var setup setupError
		if errors.As(err, &setup) {
			return err
		}

		if time.Since(started) > controllersRestartMax {
			wait = controllersRestartMin
		}

		delay := wait
		if overrun(err) {
			delay = overrunRestart
		} else {
			wait = min(wait*2, controllersRestartMax)
		}

		logger.Error("controller runtime stopped: starting it again", zap.Error(err), zap.Duration("after", delay))

		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}
	}
}

// overrun says whether err is a watch that fell behind the state's event history. The
// state reports it only as text.
func overrun(err error) bool {
	return err != nil && strings.Contains(err.Error(), "buffer overrun")
}

// setupError is a controller that cannot be registered: a bug, not worth a restart.
type setupError struct{ error }

func runControllersOnce(ctx context.Context, st state.State, ctrls []any, logger *zap.Logger) error {
	rt, err := runtime.NewRuntime(st, zap.New(quietReconciles{logger.Core()}))
	if err != nil {
		return setupError{fmt.Errorf("error creating the controller runtime: %w", err)}
	}

	for _, c := range ctrls {
		switch c := c.(type) {
		case controller.QController:
			err = rt.RegisterQController(c)
		case controller.Controller:
			err = rt.RegisterController(c)
		default:
			err = fmt.Errorf("%T is not a controller", c)
		}

		if err != nil {
			return setupError{fmt.Errorf("error registering a controller: %w", err)}
		}
	}

	if err = rt.Run(ctx); err != nil {
		return fmt.Errorf("controller runtime: %w", err)
	}

	return nil
}

// quietReconciles demotes the runtime's "reconcile succeeded", logged at info for every
// reconcile of a queue controller, to debug: the power controller alone reconciles
// each machine every poll interval, and what a reconcile did worth knowing is logged by
// the controller itself.
type quietReconciles struct{ zapcore.Core }

func (c quietReconciles) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if e.Level == zapcore.InfoLevel && e.Message == "reconcile succeeded" {
		e.Level = zapcore.DebugLevel
	}

	return c.Core.Check(e, ce)
}

func (c quietReconciles) With(fields []zapcore.Field) zapcore.Core {
	return quietReconciles{c.Core.With(fields)}
}
