package controllers

import (
	"context"
	"fmt"
	"time"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"

	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// How PowerStatus is stored: when it changed.

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
