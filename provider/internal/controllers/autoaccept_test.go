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

	"github.com/anvil-metal/anvil/provider/internal/controllers"
	"github.com/anvil-metal/anvil/provider/internal/resources"
	"github.com/anvil-metal/anvil/provider/internal/transitions"
)

func TestAutoAcceptController(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		selector string
		// accepted are the machines auto-accepted; every other keeps its acceptance.
		accepted []string
		// sentinelVendor makes a machine the selector matches.
		sentinelVendor string
	}{
		{selector: "", accepted: []string{"dell", "supermicro", "last"}, sentinelVendor: "Dell Inc."},
		{selector: "rack=r1,anvil.dev/vendor in (dell-inc),anvil.dev/memory-class=64gib", accepted: []string{"dell", "last"}, sentinelVendor: "Dell Inc."},
		{selector: "!anvil.dev/vendor", accepted: nil, sentinelVendor: ""},
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
			// The machines show no TPM: auto-accept is told to take them (the identity
			// rules are the transitions').
			tr := transitions.New(st, transitions.Options{AutoAcceptWithoutTPM: true})
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
				{"last", "Dell Inc.", ""},
			}

			wipes := map[string]string{}

			for _, m := range machines {
				mr := resources.NewMachine(m.id)
				mr.TypedSpec().Arch = "amd64"
				require.NoError(t, st.Create(ctx, mr))

				switch m.transition {
				case "reject":
					_, err = tr.Reject(ctx, m.id)
				case "accept":
					var spec *resources.MachineIntentSpec
					spec, err = tr.Accept(ctx, m.id, false)
					wipes[m.id] = spec.WipeID
				}

				require.NoError(t, err)

				if m.vendor != "" {
					inv := resources.NewMachineInventory(m.id)
					inv.TypedSpec().System.Manufacturer = m.vendor
					inv.TypedSpec().MemoryMiB = 64 * 1024
					require.NoError(t, st.Create(ctx, inv))
				}
			}

			for _, m := range machines {
				if m.vendor != "" {
					eventually(t, st, m.id, func(ml *resources.MachineLabels) bool { return ml.TypedSpec().FromInventory })
				}
			}

			for _, id := range tc.accepted {
				eventually(t, st, id, func(in *resources.MachineIntent) bool {
					return in.TypedSpec().Acceptance == resources.AcceptanceAccepted
				})
			}

			// A machine the selector matches, whose inventory comes after every other's:
			// once it is accepted, the controller has decided on every machine before it.
			sentinel := resources.NewMachine("sentinel")
			require.NoError(t, st.Create(ctx, sentinel))

			inv := resources.NewMachineInventory("sentinel")
			inv.TypedSpec().System.Manufacturer = tc.sentinelVendor
			inv.TypedSpec().MemoryMiB = 64 * 1024
			require.NoError(t, st.Create(ctx, inv))

			eventually(t, st, "sentinel", func(in *resources.MachineIntent) bool {
				return in.TypedSpec().Acceptance == resources.AcceptanceAccepted
			})

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
	tr atomic.Pointer[transitions.Service]
}

func (a *lateAcceptor) AcceptPending(ctx context.Context, id, reason string) (bool, error) {
	return a.tr.Load().AcceptPending(ctx, id, reason)
}
