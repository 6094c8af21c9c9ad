package agentapi_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/anvil-metal/anvil/internal/token"
	"github.com/anvil-metal/anvil/provider/internal/agentapi"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// health stands in for the replica's health, which the view's Current asks: it errs with
// what was set last.
type health struct{ err atomic.Pointer[error] }

func (h *health) set(err error) { h.err.Store(&err) }

func (h *health) current() error {
	if err := h.err.Load(); err != nil {
		return *err
	}

	return nil
}

// TestSessionEndsWhileTheViewMayBeStale: orders come from the view, and one that may be
// stale (Current errs: a replica cut off from etcd) gives none: the session ends
// Unavailable, naming the reason, and the agent goes to a replica whose view is current —
// from the start, or at the next change after the replica was cut off. A current view
// orders the wipe owed, and the next one after the change.
func TestSessionEndsWhileTheViewMayBeStale(t *testing.T) {
	t.Parallel()

	errCutOff := errors.New("etcd not reached for 7s")

	for _, tc := range []struct {
		name string
		// atHello and atChange are what Current says when the agent says hello, and when
		// the machine's next wipe is owed.
		atHello, atChange error
		// orders are what the agent gets, in order, before the session ends or the test.
		orders []string
	}{
		{name: "current", orders: []string{"wipe-w1", "wipe-w2"}},
		{name: "cut off", atHello: errCutOff, atChange: errCutOff},
		{name: "cut off before the change", atChange: errCutOff, orders: []string{"wipe-w1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			var h health

			f := newFixtureWith(t, func(o *agentapi.Options) { o.View.Current = h.current })
			ctx := t.Context()

			// An accepted machine that owes a wipe.
			require.NoError(t, f.store.Create(ctx, resources.NewMachine(machineID)))

			in := resources.NewMachineIntent(machineID)
			in.TypedSpec().Acceptance = resources.AcceptanceAccepted
			in.TypedSpec().WipeID = "w1"
			require.NoError(t, f.store.Create(ctx, in))
			require.Eventually(t, func() bool {
				e := f.view.Get(machineID)

				return e != nil && e.Intent != nil
			}, 5*time.Second, time.Millisecond)

			h.set(tc.atHello)

			stream, err := f.hello(t, token.Sign(f.key, token.Claims{Kind: token.KindAgent, MachineID: machineID, Issued: time.Now()}))
			require.NoError(t, err, "the agent is welcome: the token is checked without the view")

			var got []string

			if tc.atHello == nil {
				got = append(got, nextOrder(t, stream).GetId())
			}

			// Another wipe is owed: the session works its order out again.
			h.set(tc.atChange)

			_, err = safe.StateUpdateWithConflicts(ctx, f.store, in.Metadata(), func(in *resources.MachineIntent) error {
				in.TypedSpec().WipeID = "w2"

				return nil
			})
			require.NoError(t, err)

			if tc.atChange == nil {
				got = append(got, nextOrder(t, stream).GetId())
			}

			assert.Equal(t, tc.orders, got)

			if tc.atChange == nil {
				return
			}

			msg, err := stream.Recv()
			require.Error(t, err, "no order from a view that may be stale: got %v", msg.GetOrder())
			assert.Equal(t, codes.Unavailable, status.Code(err), err)
			assert.Contains(t, status.Convert(err).Message(), "does not serve")
			assert.Contains(t, status.Convert(err).Message(), errCutOff.Error())
		})
	}
}
