package controllers_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	controlv1 "github.com/anvil-metal/anvil/api/control/v1"
	"github.com/anvil-metal/anvil/provider/internal/control"
	"github.com/anvil-metal/anvil/provider/internal/controllers"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

func TestAutoAcceptController(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		selector string
		// accepted are the machines auto-accepted; every other keeps its acceptance.
		accepted []string
	}{
		{selector: "", accepted: []string{"dell", "supermicro", "last"}},
		{selector: "rack=r1,anvil.dev/vendor in (dell-inc),anvil.dev/memory-class=64gib", accepted: []string{"dell", "last"}},
		{selector: "!anvil.dev/vendor", accepted: nil},
	} {
		t.Run(tc.selector, func(t *testing.T) {
			t.Parallel()

			query, err := resources.ParseSelector(tc.selector)
			require.NoError(t, err)

			acceptor := &lateAcceptor{}
			st := run(t,
				&controllers.MachineLabelsController{Static: map[string]string{"rack": "r1"}},
				&controllers.AutoAcceptController{Acceptor: acceptor, Selector: query, Description: tc.selector},
			)
			tr := control.NewTransitions(st, nil, nil, nil)
			acceptor.tr.Store(tr)
			ctx := t.Context()

			// Each machine: its vendor ("" for no inventory) and what a person did first.
			machines := []struct {
				id, vendor, transition string
			}{
				{"dell", "Dell Inc.", ""},
				{"supermicro", "Supermicro", ""},
				{"no-inventory", "", ""},
				{"rejected", "Dell Inc.", "reject"},
				{"accepted", "Dell Inc.", "accept"},
				// Last, so that once it is decided, so are the others.
				{"last", "Dell Inc.", ""},
			}

			wipes := map[string]string{}

			for _, m := range machines {
				mr := resources.NewMachine(m.id)
				mr.TypedSpec().Arch = "amd64"
				require.NoError(t, st.Create(ctx, mr))

				switch m.transition {
				case "reject":
					_, err = tr.Reject(ctx, &controlv1.RejectRequest{MachineId: m.id})
				case "accept":
					var resp *controlv1.AcceptResponse
					resp, err = tr.Accept(ctx, &controlv1.AcceptRequest{MachineId: m.id})
					wipes[m.id] = resp.GetIntent().GetWipeId()
				}

				require.NoError(t, err)

				if m.vendor != "" {
					inv := resources.NewMachineInventory(m.id)
					inv.TypedSpec().System.Manufacturer = m.vendor
					inv.TypedSpec().MemoryMiB = 64 * 1024
					require.NoError(t, st.Create(ctx, inv))
				}
			}

			// The last machine's labels are derived from its inventory after all the
			// others': once the controller has seen them, it has decided on every machine.
			eventually(t, st, "last", func(ml *resources.MachineLabels) bool { return ml.TypedSpec().FromInventory })

			if len(tc.accepted) > 0 {
				eventually(t, st, "last", func(in *resources.MachineIntent) bool {
					return in.TypedSpec().Acceptance == resources.AcceptanceAccepted
				})
			}

			for _, m := range machines {
				in, err := safe.StateGetByID[*resources.MachineIntent](ctx, st, m.id)
				if state.IsNotFoundError(err) {
					in = resources.NewMachineIntent(m.id)
				} else {
					require.NoError(t, err)
				}

				switch {
				case slices.Contains(tc.accepted, m.id):
					assert.Equal(t, resources.AcceptanceAccepted, in.TypedSpec().Acceptance, m.id)
					assert.NotEmpty(t, in.TypedSpec().WipeID, "%s: acceptance owes a wipe", m.id)
				case m.transition == "reject":
					assert.Equal(t, resources.AcceptanceRejected, in.TypedSpec().Acceptance, "%s: never un-rejected", m.id)
				case m.transition == "accept":
					assert.Equal(t, wipes[m.id], in.TypedSpec().WipeID, "%s: an accepted machine is left alone", m.id)
				default:
					assert.Equal(t, resources.AcceptancePending, in.TypedSpec().Acceptance, m.id)
				}
			}
		})
	}
}

// lateAcceptor is the transitions over the state run() opens, set once it is open.
type lateAcceptor struct {
	tr atomic.Pointer[control.Transitions]
}

func (a *lateAcceptor) AcceptPending(ctx context.Context, id, reason string) (bool, error) {
	return a.tr.Load().AcceptPending(ctx, id, reason)
}
