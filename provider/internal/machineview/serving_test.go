package machineview_test

import (
	"errors"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/provider/internal/machineview"
)

// health stands in for the replica's health, which a view's Current asks: it errs with
// what was set last.
type health struct{ err atomic.Pointer[error] }

func (h *health) set(err error) { h.err.Store(&err) }

func (h *health) current() error {
	if err := h.err.Load(); err != nil {
		return *err
	}

	return nil
}

// TestServing: a view serves boots only once it holds the state and while Current says it
// is not stale; it serves again when Current recovers. A starting view says it is
// starting, whatever Current says: it holds nothing to be stale.
func TestServing(t *testing.T) {
	t.Parallel()

	errCutOff := errors.New("etcd not reached for 7s")

	var h health

	v := machineview.New()
	v.Current = h.current

	for _, tc := range []struct {
		name    string
		current error
	}{
		{"starting", nil},
		{"starting and cut off", errCutOff},
	} {
		h.set(tc.current)
		assert.ErrorIs(t, v.Serving(), machineview.ErrStarting, tc.name)
	}

	h.set(nil)
	runView(t, v, openState(t))

	for _, tc := range []struct {
		name    string
		current error
	}{
		{"ready", nil},
		{"cut off", errCutOff},
		{"still cut off", errCutOff},
		{"reached again", nil},
		{"cut off again", errCutOff},
	} {
		h.set(tc.current)

		err := v.Serving()
		if tc.current == nil {
			assert.NoError(t, err, tc.name)

			continue
		}

		require.ErrorIs(t, err, errCutOff, tc.name)
		assert.NotErrorIs(t, err, machineview.ErrStarting, tc.name)
		assert.Contains(t, err.Error(), "may be stale", tc.name)
	}
}

// TestServingWithoutCurrent: a view with no Current (a provider on its own state, which
// cannot be stale) serves once ready.
func TestServingWithoutCurrent(t *testing.T) {
	t.Parallel()

	v := machineview.New()
	require.ErrorIs(t, v.Serving(), machineview.ErrStarting)

	runView(t, v, openState(t))
	assert.NoError(t, v.Serving())
}
