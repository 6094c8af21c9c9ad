package controllers_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/provider/internal/power"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// The power controller under high availability: stopped at any moment and replaced by
// another from the state alone, its BMC calls gated.

// dyingState is a provider's view of the state that nothing it writes reaches once it
// died.
type dyingState struct {
	state.CoreState

	dead *atomic.Bool
}

var errDied = errors.New("the provider died")

func (s dyingState) Create(ctx context.Context, r resource.Resource, opts ...state.CreateOption) error {
	if s.dead.Load() {
		return errDied
	}

	return s.CoreState.Create(ctx, r, opts...)
}

func (s dyingState) Update(ctx context.Context, r resource.Resource, opts ...state.UpdateOption) error {
	if s.dead.Load() {
		return errDied
	}

	return s.CoreState.Update(ctx, r, opts...)
}

func (s dyingState) Destroy(ctx context.Context, ptr resource.Pointer, opts ...state.DestroyOption) error {
	if s.dead.Load() {
		return errDied
	}

	return s.CoreState.Destroy(ctx, ptr, opts...)
}

// machineCase is one machine set up for a power action: its BMC's power, the intent and
// status that want the action, and what the action records.
type machineCase struct {
	name     string
	on       bool
	intent   func(*resources.MachineIntentSpec)
	hung     bool // a kexec handoff ordered long ago and never seen through
	call     string
	action   string
	rebootID string
	fallback string // the kexec fallback served
}

func actionCases() []machineCase {
	accepted := func(s *resources.MachineIntentSpec) { s.Acceptance = resources.AcceptanceAccepted }
	allocated := func(s *resources.MachineIntentSpec) {
		s.Acceptance, s.Allocation = resources.AcceptanceAccepted, &resources.Allocation{ID: "a1"}
	}

	return []machineCase{
		{name: "power off", on: true, intent: accepted, call: "off", action: "off"},
		{name: "power on", on: false, intent: allocated, call: "pxe", action: "pxe+on"},
		{name: "reboot request", on: true, intent: func(s *resources.MachineIntentSpec) {
			allocated(s)
			s.RebootID = "r1"
		}, call: "cycle", action: "pxe+cycle", rebootID: "r1"},
		{name: "kexec fallback", on: true, intent: allocated, hung: true, call: "cycle", action: "pxe+cycle", fallback: "handoff-a1"},
	}
}

// setMachine sets up the machine of the case, BMC off or on as the case says.
func (c machineCase) setMachine(t *testing.T, st *resources.Store, bmcs *fakeBMCs, id string, start time.Time) {
	t.Helper()

	bmcs.on[id] = c.on
	setBMC(t, st, id, "pw")
	setIntent(t, st, id, c.intent)

	if c.hung {
		status := resources.NewMachineStatus(id)
		status.TypedSpec().Handoff = &resources.HandoffRecord{AllocationID: "a1", OrderedAt: start.Add(-time.Hour)}
		require.NoError(t, st.Create(t.Context(), status))
	}
}

// An action is in the state before the BMC is asked for it: what the BMC's first call
// of the action finds stored already records it, and the reboot request it serves.
func TestPowerControllerRecordsBeforeActing(t *testing.T) {
	t.Parallel()

	const id = "00000000-0000-0000-0000-000000000001"

	for _, tc := range actionCases() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			clock := &fakeClock{now: start}
			st := openStore(t)
			bmcs := &fakeBMCs{on: map[string]bool{}, down: map[string]bool{}}
			tc.setMachine(t, st, bmcs, id, start)

			var (
				seenOnce sync.Once
				seen     *resources.PowerStatusSpec
				found    = make(chan struct{})
			)

			bmcs.hook = func(_, call string) {
				if call != tc.call {
					return
				}

				seenOnce.Do(func() {
					if ps, err := safe.StateGetByID[*resources.PowerStatus](context.Background(), st, id); err == nil {
						seen = new(ps.TypedSpec().DeepCopy())
					}

					close(found)
				})
			}

			runPower(t, st, powerController(bmcs, clock))

			select {
			case <-found:
			case <-time.After(10 * time.Second):
				t.Fatalf("no %s call", tc.call)
			}

			require.NotNil(t, seen, "no power status stored before the BMC was asked")
			assert.Equal(t, tc.action, seen.LastAction)
			assert.True(t, seen.LastActionAt.Equal(start), "recorded at %s", seen.LastActionAt)
			assert.Equal(t, tc.rebootID, seen.RebootID)
			assert.Equal(t, tc.fallback, seen.HandoffRebootID)

			// Then carried out, and the power read again.
			eventually(t, st, id, func(ps *resources.PowerStatus) bool {
				return ps.TypedSpec().State != resources.PowerUnknown && ps.TypedSpec().LastAction == tc.action
			})
			assert.Equal(t, 1, bmcs.count("1:"+tc.call), bmcs.log())
		})
	}
}

// A provider that dies just after its BMC took a reboot, before it wrote anything of the
// result, is replaced by another from the state alone: the new one does not reboot the
// machine again, not even once MinActionInterval is over.
func TestPowerControllerTakeoverDoesNotRepeatReboot(t *testing.T) {
	t.Parallel()

	const id = "00000000-0000-0000-0000-000000000001"

	for _, tc := range actionCases() {
		if tc.call != "cycle" {
			continue
		}

		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			clock := &fakeClock{now: start}
			st := openStore(t)
			bmcs := &fakeBMCs{on: map[string]bool{}, down: map[string]bool{}}
			tc.setMachine(t, st, bmcs, id, start)

			// The first provider dies as its BMC takes the cycle: from then on it neither
			// writes nor calls a BMC.
			var dead atomic.Bool

			bmcs.hook = func(_, call string) {
				if call == "cycle" {
					dead.Store(true)
				}
			}

			first := powerController(bmcs, clock)
			first.Dialers = power.Dialers{"fake": func(ctx context.Context, ep power.Endpoint) (power.Client, error) {
				if dead.Load() {
					return nil, errDied
				}

				return bmcs.dial(ctx, ep)
			}}

			stop := runPower(t, state.WrapCore(dyingState{CoreState: st, dead: &dead}), first)

			require.Eventually(t, dead.Load, 10*time.Second, time.Millisecond)
			stop()

			// The next takes over, and time passes well beyond MinActionInterval.
			runPower(t, st, powerController(bmcs, clock))

			ps := eventually(t, st, id, func(ps *resources.PowerStatus) bool { return ps.TypedSpec().State == resources.PowerOn })
			assert.Equal(t, tc.action, ps.TypedSpec().LastAction)

			for range 3 {
				clock.advance(2 * time.Minute)
				clock.rounds(t, 20)
			}

			log := strings.Join(bmcs.log(), " ")
			assert.Equal(t, 1, strings.Count(log, "1:cycle"), "rebooted once: %s", log)

			ps = eventually(t, st, id, func(*resources.PowerStatus) bool { return true })
			assert.Equal(t, tc.rebootID, ps.TypedSpec().RebootID)
			assert.Equal(t, tc.fallback, ps.TypedSpec().HandoffRebootID)
		})
	}
}

// MayAct gates every BMC call: refused, the BMC is not called and nothing is written;
// allowed again, the machine is driven. A gate that turns between the read and the
// action lets nothing be recorded; one that turns once the action is recorded does not
// stop it: recorded through the fence, it is taken (never lost), and a takeover would find
// it recorded (never repeated).
func TestPowerControllerMayAct(t *testing.T) {
	t.Parallel()

	const id = "00000000-0000-0000-0000-000000000001"

	errNotLeader := errors.New("not the leader")

	for _, tc := range []struct {
		name string
		// allowed is how many BMC calls MayAct allows before it refuses (-1: no MayAct).
		allowed    int64
		calls      []string
		lastAction string // "": no power status written
	}{
		{"no gate", -1, []string{"1:state", "1:off", "1:state"}, "off"},
		{"refused", 0, nil, ""},
		{"turned after the read", 1, []string{"1:state"}, ""},
		{"turned after the action was recorded", 2, []string{"1:state", "1:off"}, "off"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
			st := openStore(t)
			bmcs := &fakeBMCs{on: map[string]bool{id: true}, down: map[string]bool{}}
			setBMC(t, st, id, "pw")
			setIntent(t, st, id, func(s *resources.MachineIntentSpec) { s.Acceptance = resources.AcceptanceAccepted })

			var (
				allowed atomic.Int64
				asked   atomic.Int64
			)

			allowed.Store(tc.allowed)

			ctrl := powerController(bmcs, clock)
			if tc.allowed >= 0 {
				ctrl.MayAct = func() error {
					if asked.Add(1) > allowed.Load() {
						return errNotLeader
					}

					return nil
				}
			}

			runPower(t, st, ctrl)
			clock.rounds(t, 50)

			assert.Equal(t, tc.calls, bmcs.log())

			ps, err := safe.StateGetByID[*resources.PowerStatus](t.Context(), st, id)
			if tc.lastAction == "" {
				require.True(t, state.IsNotFoundError(err), "no power status written: %v", ps)
			} else {
				require.NoError(t, err)
				assert.Equal(t, tc.lastAction, ps.TypedSpec().LastAction)
			}

			if tc.allowed < 0 {
				return
			}

			// Allowed again: the machine is read and driven as its state wants.
			allowed.Store(1 << 40)
			clock.advance(time.Minute)
			eventually(t, st, id, func(ps *resources.PowerStatus) bool { return ps.TypedSpec().State == resources.PowerOff })
		})
	}
}
