package controllers

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"go.uber.org/zap"

	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// sweepInterval is how often MachineController goes over every machine: a token whose
// observation was dropped is recorded within it, and a forgotten machine is gone within
// it after its time.
const sweepInterval = time.Minute

// DefaultMaxPendingMachines bounds the machines recorded from a boot script alone
// (--max-pending-machines): pending, no agent of theirs registered, nothing recorded of
// them by a person, Omni or an agent. A real machine's agent registers within a minute
// of its boot script, and one registered is recorded past the bound: 1024 covers a
// provisioning network booting racks at once, while anyone may ask for a boot script
// for a made-up UUID, each one a resource in the state and entries in memory.
const DefaultMaxPendingMachines = 1024

// pendingMachineTTL is how long a machine MaxPending bounds is kept without a boot
// script asked for it: a real machine that never gets its agent up boots again well
// within it (its record's boot time is refreshed every pxeStampInterval).
const pendingMachineTTL = time.Hour

// admit says whether the observation may be recorded: a new machine only while fewer
// than MaxPending are pending unregistered, or one whose agent registered. It keeps
// pending up to date with what it admits.
func (ctrl *MachineController) admit(current *resources.Machine, obs PXEObservation) bool {
	id := obs.MachineID

	switch {
	case obs.Registered:
		delete(ctrl.pending, id)

		return true
	case current != nil:
		if _, ok := ctrl.pending[id]; ok {
			ctrl.pending[id] = obs.At
		}

		return true
	case len(ctrl.pending) >= cmp.Or(ctrl.MaxPending, DefaultMaxPendingMachines):
		ctrl.refused++

		return false
	}

	if ctrl.pending == nil {
		ctrl.pending = map[resource.ID]time.Time{}
	}

	ctrl.pending[id] = obs.At

	return true
}

// forgettable says whether nothing but boot scripts recorded the machine: no agent of
// it registered or reported an inventory, and no person or Omni decided anything of it
// (an intent, a BMC). Only a machine not registered is read further: an inventory is
// kilobytes, and a sweep must not copy every machine's.
func forgettable(ctx context.Context, r controller.Reader, m *resources.Machine) (bool, error) {
	if !m.TypedSpec().AgentRegistered.IsZero() {
		return false, nil
	}

	id := m.Metadata().ID()

	for _, md := range []*resource.Metadata{
		resources.NewMachineIntent(id).Metadata(), resources.NewBMCConfig(id).Metadata(), resources.NewMachineInventory(id).Metadata(),
	} {
		_, err := r.Get(ctx, md)

		switch {
		case err == nil:
			return false, nil
		case !state.IsNotFoundError(err):
			return false, fmt.Errorf("error reading %s %s: %w", md.Type(), id, err)
		}
	}

	return true, nil
}

// sweep goes over every machine: the newest agent token the boot services issued is
// recorded where the record is behind, and the machines recorded from boot scripts alone
// are counted, those unseen for PendingTTL forgotten.
func (ctrl *MachineController) sweep(ctx context.Context, r controller.Runtime, logger *zap.Logger) error {
	machines, err := safe.ReaderListAll[*resources.Machine](ctx, r)
	if err != nil {
		return fmt.Errorf("error listing machines: %w", err)
	}

	now := time.Now()
	ttl := cmp.Or(ctrl.PendingTTL, pendingMachineTTL)
	pending := map[resource.ID]time.Time{}
	behind, forgotten := 0, 0

	for m := range machines.All() {
		id := m.Metadata().ID()

		caughtUp, err := ctrl.catchUp(ctx, r, m)
		if err != nil {
			return err
		}

		if caughtUp {
			behind++
		}

		forget, err := forgettable(ctx, r, m)
		if err != nil {
			return err
		}

		if !forget {
			continue
		}

		seen := m.TypedSpec().LastPXE
		if seen.Before(m.TypedSpec().FirstSeen) {
			seen = m.TypedSpec().FirstSeen
		}

		if now.Sub(seen) <= ttl {
			pending[id] = seen

			continue
		}

		if err = r.Destroy(ctx, m.Metadata()); err != nil {
			return fmt.Errorf("error forgetting machine %s: %w", id, err)
		}

		forgotten++
	}

	ctrl.pending = pending

	if behind > 0 {
		logger.Info("recorded the newest agent tokens of machines whose boot observations were dropped", zap.Int("machines", behind))
	}

	if forgotten > 0 {
		logger.Info("forgot pending machines no agent registered for, unseen for their time",
			zap.Int("machines", forgotten), zap.Duration("after", ttl))
	}

	if ctrl.refused > 0 {
		logger.Warn("boot scripts asked for new machines not recorded: as many pending machines without a registered agent as --max-pending-machines allows",
			zap.Int("refused", ctrl.refused), zap.Int("max_pending_machines", cmp.Or(ctrl.MaxPending, DefaultMaxPendingMachines)))

		ctrl.refused = 0
	}

	return nil
}

// catchUp records the newest agent token issued to the machine when its record is
// behind, and says whether it was.
func (ctrl *MachineController) catchUp(ctx context.Context, r controller.Runtime, m *resources.Machine) (bool, error) {
	if ctrl.AgentBoots == nil {
		return false, nil
	}

	id := m.Metadata().ID()

	newest := ctrl.AgentBoots(id)
	if !newest.After(m.TypedSpec().AgentBootIssued) {
		return false, nil
	}

	if err := safe.WriterModify(ctx, r, resources.NewMachine(id), func(m *resources.Machine) error {
		if newest.After(m.TypedSpec().AgentBootIssued) {
			m.TypedSpec().AgentBootIssued = newest
		}

		return nil
	}); err != nil {
		return false, fmt.Errorf("error recording machine %s's newest agent token: %w", id, err)
	}

	return true, nil
}
