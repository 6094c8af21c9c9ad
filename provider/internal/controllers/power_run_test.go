package controllers_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/controller/runtime"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/anvil-metal/anvil/provider/internal/controllers"
	"github.com/anvil-metal/anvil/provider/internal/lifecycle"
	"github.com/anvil-metal/anvil/provider/internal/power"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// fakeBMCs are machines' BMCs in memory, keyed by machine UUID, with a log of calls.
type fakeBMCs struct {
	mu    sync.Mutex
	on    map[string]bool
	down  map[string]bool
	calls []string

	// hook, set before the controller runs, is called at each call before it is logged
	// and carried out, outside the lock: a test looks at the state there, or holds the call.
	hook func(id, call string)
}

type fakeBMC struct {
	f  *fakeBMCs
	id string
	pw string
}

func (f *fakeBMCs) dial(_ context.Context, ep power.Endpoint) (power.Client, error) {
	return &fakeBMC{f: f, id: ep.MachineUUID, pw: ep.Password}, nil
}

func (f *fakeBMCs) count(call string) int {
	f.mu.Lock()
	defer f.mu.Unlock()

	n := 0

	for _, c := range f.calls {
		if c == call {
			n++
		}
	}

	return n
}

func (f *fakeBMCs) log() []string {
	f.mu.Lock()
	defer f.mu.Unlock()

	return slices.Clone(f.calls)
}

func (b *fakeBMC) call(name string, apply func()) error {
	if b.f.hook != nil {
		b.f.hook(b.id, name)
	}

	b.f.mu.Lock()
	defer b.f.mu.Unlock()

	b.f.calls = append(b.f.calls, b.id[len(b.id)-1:]+":"+name)

	if b.f.down[b.id] {
		return fmt.Errorf("no answer: %w", power.ErrUnreachable)
	}

	if b.pw != "pw" {
		return power.ErrUnauthorized
	}

	if apply != nil {
		apply()
	}

	return nil
}

func (b *fakeBMC) PowerState(context.Context) (bool, error) {
	st := false

	err := b.call("state", func() {
		if b.f.on[b.id] {
			st = true
		}
	})

	return st, err
}

func (b *fakeBMC) PowerOn(context.Context) error {
	return b.call("on", func() { b.f.on[b.id] = true })
}

func (b *fakeBMC) PowerOff(context.Context) error {
	return b.call("off", func() { b.f.on[b.id] = false })
}

func (b *fakeBMC) PowerCycle(context.Context) error {
	return b.call("cycle", func() { b.f.on[b.id] = true })
}

func (b *fakeBMC) SetPXEOnce(context.Context, power.BootMode) error { return b.call("pxe", nil) }
func (b *fakeBMC) Close() error                                     { return nil }

func setBMC(t *testing.T, st *resources.Store, id, password string) {
	t.Helper()

	cfg := resources.NewBMCConfig(id)
	*cfg.TypedSpec() = resources.BMCConfigSpec{Kind: "fake", Address: "10.0.0." + id[len(id)-1:], Source: resources.BMCSourceUser, HasPassword: true}
	require.NoError(t, st.Create(t.Context(), cfg))

	secret := resources.NewBMCSecret(id)
	secret.TypedSpec().Password = password
	require.NoError(t, st.Create(t.Context(), secret))
}

func setIntent(t *testing.T, st *resources.Store, id string, change func(*resources.MachineIntentSpec)) {
	t.Helper()

	_, err := safe.StateModifyWithResult(t.Context(), st, resources.NewMachineIntent(id), func(in *resources.MachineIntent) error {
		change(in.TypedSpec())

		return nil
	})
	require.NoError(t, err)
}

// fakeClock is the power controller's time, moved by the test. Every wait it is asked
// for is a few real milliseconds, so the controller looks again and again while the
// test holds time still, and acts the moment the test moves it past a deadline.
type fakeClock struct {
	mu    sync.Mutex
	now   time.Time
	waits atomic.Int64
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()

	return c.now
}

func (c *fakeClock) Until(time.Time) time.Duration {
	c.waits.Add(1)

	return 5 * time.Millisecond
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()

	c.now = c.now.Add(d)
}

// rounds waits until the controller has looked at its machines n more times.
func (c *fakeClock) rounds(t *testing.T, n int64) {
	t.Helper()

	target := c.waits.Load() + n
	require.Eventually(t, func() bool { return c.waits.Load() >= target }, 10*time.Second, time.Millisecond)
}

// openStore is a state of the test's own, which several controllers may run over in turn.
func openStore(t *testing.T) *resources.Store {
	t.Helper()

	st, err := resources.Open(t.Context(), t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, st.Close()) })

	return st
}

// runPower runs a power controller over st, as one provider process would, until stop
// (or the test's end).
func runPower(t *testing.T, st state.State, ctrl *controllers.PowerController) (stop func()) {
	t.Helper()

	rt, err := runtime.NewRuntime(st, zaptest.NewLogger(t))
	require.NoError(t, err)
	require.NoError(t, rt.RegisterQController(ctrl))

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)

	go func() { done <- rt.Run(ctx) }()

	var once sync.Once

	stop = func() {
		once.Do(func() {
			cancel()
			require.NoError(t, <-done)
		})
	}
	t.Cleanup(stop)

	return stop
}

// powerController is a power controller on fake BMCs and the test's clock: a poll every
// 30 s, a minute between two actions, a kexec handoff given up after two minutes.
func powerController(bmcs *fakeBMCs, clock *fakeClock) *controllers.PowerController {
	return &controllers.PowerController{
		Dialers:      power.Dialers{"fake": bmcs.dial},
		Policy:       lifecycle.Policy{IdlePower: resources.PowerOff, KexecTimeout: 2 * time.Minute},
		PollInterval: 30 * time.Second, MinActionInterval: time.Minute,
		Timeout: time.Second, Clock: clock,
	}
}

// The controller reads and drives accepted machines only, holds actions to the rate
// limit and failing BMCs to their backoff, carries out reboots once, polls on time,
// and turns BMC failures into status — on a clock the test moves.
func TestPowerController(t *testing.T) {
	t.Parallel()

	const (
		accepted = "00000000-0000-0000-0000-000000000001"
		pending  = "00000000-0000-0000-0000-000000000002"
		rejected = "00000000-0000-0000-0000-000000000003"
		broken   = "00000000-0000-0000-0000-000000000004"
		badpass  = "00000000-0000-0000-0000-000000000005"
	)

	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	bmcs := &fakeBMCs{on: map[string]bool{accepted: true, pending: true, rejected: true, broken: true}, down: map[string]bool{broken: true}}
	st := run(t, &controllers.PowerController{
		Dialers:      power.Dialers{"fake": bmcs.dial},
		Policy:       lifecycle.Policy{IdlePower: resources.PowerOff},
		PollInterval: 30 * time.Second, MinActionInterval: time.Minute,
		Timeout: time.Second, Clock: clock,
	})

	for _, id := range []string{accepted, pending, rejected, broken} {
		setBMC(t, st, id, "pw")
	}

	setBMC(t, st, badpass, "wrong")

	setIntent(t, st, pending, func(s *resources.MachineIntentSpec) { s.Acceptance = resources.AcceptancePending })
	setIntent(t, st, rejected, func(s *resources.MachineIntentSpec) { s.Acceptance = resources.AcceptanceRejected })

	for _, id := range []string{accepted, broken, badpass} {
		setIntent(t, st, id, func(s *resources.MachineIntentSpec) { s.Acceptance = resources.AcceptanceAccepted })
	}

	// Accepted and idle: read, then powered off.
	eventually(t, st, accepted, func(ps *resources.PowerStatus) bool {
		return ps.TypedSpec().LastAction == "off" && ps.TypedSpec().State == resources.PowerOff
	})

	// A BMC that does not answer and one that refuses the password are statuses.
	ps := eventually(t, st, broken, func(ps *resources.PowerStatus) bool { return ps.TypedSpec().Condition == "unreachable" })
	assert.Contains(t, ps.TypedSpec().Error, "no answer")
	eventually(t, st, badpass, func(ps *resources.PowerStatus) bool { return ps.TypedSpec().Condition == "unauthorized" })

	// Pending and rejected: listed as hands off.
	eventually(t, st, pending, func(ps *resources.PowerStatus) bool { return ps.TypedSpec().Condition == "hands-off" })
	eventually(t, st, rejected, func(ps *resources.PowerStatus) bool { return ps.TypedSpec().Condition == "hands-off" })

	// A failing BMC is not tried again before its backoff ends, then it is.
	tries := bmcs.count("4:state")
	clock.rounds(t, 50)
	assert.Equal(t, tries, bmcs.count("4:state"), "no retry within the backoff")
	clock.advance(5 * time.Minute)
	require.Eventually(t, func() bool { return bmcs.count("4:state") > tries }, 10*time.Second, time.Millisecond, "retried after the backoff")

	// Allocated: on is wanted, but the last action (off) was less than a minute ago.
	clock.advance(-5 * time.Minute) // back to where the off happened, for the rate limit below
	setIntent(t, st, accepted, func(s *resources.MachineIntentSpec) { s.Allocation = &resources.Allocation{ID: "a1"} })
	eventually(t, st, accepted, func(ps *resources.PowerStatus) bool { return ps.TypedSpec().Desired == resources.PowerOn })
	clock.rounds(t, 50)
	assert.NotContains(t, strings.Join(bmcs.log(), " "), "1:on", "held back by the rate limit")

	// Once the minute is over: PXE once, then on.
	clock.advance(61 * time.Second)
	eventually(t, st, accepted, func(ps *resources.PowerStatus) bool {
		return ps.TypedSpec().LastAction == "pxe+on" && ps.TypedSpec().State == resources.PowerOn
	})

	// A reboot request: PXE once, then a cycle, once, after the rate limit.
	setIntent(t, st, accepted, func(s *resources.MachineIntentSpec) { s.RebootID = "r1" })
	clock.rounds(t, 20)
	assert.NotContains(t, strings.Join(bmcs.log(), " "), "1:cycle", "held back by the rate limit")
	clock.advance(61 * time.Second)
	eventually(t, st, accepted, func(ps *resources.PowerStatus) bool {
		return ps.TypedSpec().RebootID == "r1" && ps.TypedSpec().State == resources.PowerOn
	})

	// Steady: nothing more is done, and the BMC is read again once a poll interval passed.
	clock.rounds(t, 50)
	reads := bmcs.count("1:state")
	clock.rounds(t, 50)
	assert.Equal(t, reads, bmcs.count("1:state"), "no read before the poll interval")
	clock.advance(31 * time.Second)
	require.Eventually(t, func() bool { return bmcs.count("1:state") > reads }, 10*time.Second, time.Millisecond, "read again after the poll interval")
	clock.rounds(t, 50)

	log := strings.Join(bmcs.log(), " ")
	assert.NotContains(t, log, "2:", "a pending machine's BMC is never called")
	assert.NotContains(t, log, "3:", "a rejected machine's BMC is never called")
	assert.Equal(t, 1, strings.Count(log, "1:cycle"), "the reboot is done once: %s", log)
	assert.Equal(t, 1, strings.Count(log, "1:off"), log)
	assert.Equal(t, 1, strings.Count(log, "1:on"), log)
	assert.Regexp(t, `1:off .*1:pxe 1:on .*1:pxe 1:cycle`, log)
	assert.NotContains(t, log, "4:off", "nothing is done to a BMC that is down")

	// Its BMC config removed, the machine's power status goes too.
	require.NoError(t, st.Destroy(t.Context(), resources.NewBMCConfig(accepted).Metadata()))
	require.Eventually(t, func() bool {
		_, err := safe.StateGetByID[*resources.PowerStatus](t.Context(), st, accepted)

		return state.IsNotFoundError(err)
	}, 10*time.Second, time.Millisecond)
}

// A kexec handoff whose Talos is not seen up by the deadline falls back to a firmware
// boot through the BMC (PXE once, then a cycle), once, saying why; one seen up does not.
func TestPowerControllerHandoffFallback(t *testing.T) {
	t.Parallel()

	const (
		hung = "00000000-0000-0000-0000-000000000001"
		up   = "00000000-0000-0000-0000-000000000002"
	)

	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := &fakeClock{now: start}
	bmcs := &fakeBMCs{on: map[string]bool{hung: true, up: true}, down: map[string]bool{}}
	st := run(t, &controllers.PowerController{
		Dialers:      power.Dialers{"fake": bmcs.dial},
		Policy:       lifecycle.Policy{IdlePower: resources.PowerOff, KexecTimeout: 2 * time.Minute},
		PollInterval: 30 * time.Second, MinActionInterval: time.Minute,
		Timeout: time.Second, Clock: clock,
	})

	for _, id := range []string{hung, up} {
		setBMC(t, st, id, "pw")
		setIntent(t, st, id, func(s *resources.MachineIntentSpec) {
			s.Acceptance, s.Allocation = resources.AcceptanceAccepted, &resources.Allocation{ID: "a1"}
		})

		status := resources.NewMachineStatus(id)
		status.TypedSpec().Handoff = &resources.HandoffRecord{AllocationID: "a1", OrderedAt: start}

		if id == up {
			status.TypedSpec().Handoff.ConfirmedAt = start.Add(30 * time.Second)
		}

		require.NoError(t, st.Create(t.Context(), status))
	}

	eventually(t, st, hung, func(ps *resources.PowerStatus) bool { return ps.TypedSpec().State == resources.PowerOn })
	clock.rounds(t, 50)
	assert.NotContains(t, strings.Join(bmcs.log(), " "), "cycle", "nothing before the deadline")

	clock.advance(2*time.Minute + time.Second)
	ps := eventually(t, st, hung, func(ps *resources.PowerStatus) bool { return ps.TypedSpec().HandoffRebootID == "handoff-a1" })
	assert.Equal(t, "pxe+cycle", ps.TypedSpec().LastAction)
	assert.Equal(t, "Talos not seen up 2m1s after the kexec order", ps.TypedSpec().LastActionReason)

	clock.advance(5 * time.Minute)
	clock.rounds(t, 50)

	log := strings.Join(bmcs.log(), " ")
	assert.Equal(t, 1, strings.Count(log, "1:cycle"), "the fallback is done once: %s", log)
	assert.Regexp(t, `1:pxe 1:cycle`, log)
	assert.NotContains(t, log, "2:cycle", "a handoff seen through is left alone")
}
