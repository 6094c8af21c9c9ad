package controllers

import (
	"context"
	"fmt"
	"time"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"go.uber.org/zap"

	"github.com/anvil-metal/anvil/provider/internal/power"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// How PowerStatus is stored: when it changed, and an action before it is taken.

// observedRefresh is how old the stored ObservedAt may grow while the BMC reads as
// stored: the one write a steady machine costs, so that its status still shows that its
// BMC is being read.
const observedRefresh = 10 * time.Minute

// worthWriting says whether status s is worth storing over the stored one: something
// other than the time of the last read changed, or the stored time of the last read is
// observedRefresh old. A poll that reads what is stored costs no write.
func worthWriting(stored, s resources.PowerStatusSpec) bool {
	if s.ObservedAt.Sub(stored.ObservedAt) >= observedRefresh || !s.LastActionAt.Equal(stored.LastActionAt) {
		return true
	}

	// Times compare with Equal (a stored one has lost its monotonic reading), the rest
	// as values.
	stored.ObservedAt, stored.LastActionAt = time.Time{}, time.Time{}
	s.ObservedAt, s.LastActionAt = time.Time{}, time.Time{}

	return s != stored
}

// recorder is how machine id's status is stored over the stored one (nil: none yet):
// only when it is worth a write.
func recorder(ctx context.Context, r controller.QRuntime, id string, stored *resources.PowerStatusSpec) func(resources.PowerStatusSpec) error {
	return func(s resources.PowerStatusSpec) error {
		if stored != nil && !worthWriting(*stored, s) {
			return nil
		}

		if err := safe.WriterModify(ctx, r, resources.NewPowerStatus(id), func(ps *resources.PowerStatus) error {
			*ps.TypedSpec() = s

			return nil
		}); err != nil {
			return fmt.Errorf("error writing the power status of machine %s: %w", id, err)
		}

		stored = &s

		return nil
	}
}

// take stores the action recorded on status, and only then asks the BMC for it: a
// controller that takes over after a crash mid-action, or a retry after a failed write,
// finds it, so that it holds back and does not reboot the machine again. It records
// the result on status and returns when the machine wants looking at again.
func (ctrl *PowerController) take(
	ctx context.Context, logger *zap.Logger, id string, ep power.Endpoint, status *resources.PowerStatusSpec, record func(resources.PowerStatusSpec) error,
) (time.Time, error) {
	action := status.LastAction

	// Not known until read again after the action.
	status.State = resources.PowerUnknown

	if err := record(*status); err != nil {
		return time.Time{}, err
	}

	// Recorded, it is taken even should MayAct turn now: the write went through the
	// fence, so this replica led when it stored it, and whoever leads next finds it and
	// holds back. Not taking it would lose it: served as recorded, never done.
	if err := ctrl.act(ctx, ep, action); err != nil {
		failed(status, err)
		logger.Warn("power action failed", zap.String("action", action), zap.Stringer("bmc", ep), zap.Error(err))

		return retryAt(id, *status), nil
	}

	succeeded(status)
	logger.Info("power action", zap.String("action", action), zap.Stringer("bmc", ep))

	// Read again shortly rather than guess.
	return status.LastActionAt.Add(min(settleAfter, ctrl.pollInterval())), nil
}
