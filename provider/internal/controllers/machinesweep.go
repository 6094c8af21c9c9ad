package controllers

import (
	"context"
	"fmt"
	"time"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"go.uber.org/zap"

	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// sweepInterval is how often MachineController goes over every machine: a token whose
// observation was dropped is recorded within it.
const sweepInterval = time.Minute

// sweep goes over every machine: the newest agent token the boot services issued is
// recorded where the record is behind.
func (ctrl *MachineController) sweep(ctx context.Context, r controller.Runtime, logger *zap.Logger) error {
	if ctrl.AgentBoots == nil {
		return nil
	}

	machines, err := safe.ReaderListAll[*resources.Machine](ctx, r)
	if err != nil {
		return fmt.Errorf("error listing machines: %w", err)
	}

	behind := 0

	for m := range machines.All() {
		caughtUp, err := ctrl.catchUp(ctx, r, m)
		if err != nil {
			return err
		}

		if caughtUp {
			behind++
		}
	}

	if behind > 0 {
		logger.Info("recorded the newest agent tokens of machines whose boot observations were dropped", zap.Int("machines", behind))
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
