package controllers_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/provider/internal/controllers"
	"github.com/anvil-metal/anvil/provider/internal/power"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// fakeBMCs are machines' BMCs in memory, keyed by machine UUID, with a log of calls.
type fakeBMCs struct {
	mu    sync.Mutex
	on    map[string]bool
	down  map[string]bool
	calls []string
}

type fakeBMC struct {
	f  *fakeBMCs
	id string
	pw string
}

func (f *fakeBMCs) dial(_ context.Context, ep power.Endpoint) (power.Client, error) {
	return &fakeBMC{f: f, id: ep.MachineUUID, pw: ep.Password}, nil
}

func (f *fakeBMCs) log() []string {
	f.mu.Lock()
	defer f.mu.Unlock()

	return slices.Clone(f.calls)
}

func (b *fakeBMC) call(name string, apply func()) error {
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

func (b *fakeBMC) PowerState(context.Context) (power.State, error) {
	st := power.StateOff

	err := b.call("state", func() {
		if b.f.on[b.id] {
			st = power.StateOn
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

// The controller reads and drives accepted machines only, carries out reboots once,
// and turns BMC failures into status.
func TestPowerController(t *testing.T) {
	t.Parallel()

	const (
		accepted = "00000000-0000-0000-0000-000000000001"
		pending  = "00000000-0000-0000-0000-000000000002"
		rejected = "00000000-0000-0000-0000-000000000003"
		broken   = "00000000-0000-0000-0000-000000000004"
		badpass  = "00000000-0000-0000-0000-000000000005"
	)

	bmcs := &fakeBMCs{on: map[string]bool{accepted: true, pending: true, rejected: true, broken: true}, down: map[string]bool{broken: true}}
	st := run(t, &controllers.PowerController{
		Dialers:      power.Dialers{"fake": bmcs.dial},
		PollInterval: time.Hour, MinActionInterval: 0,
		Sweep: power.SweepOptions{Timeout: time.Second},
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

	// Allocated: PXE once, then on.
	setIntent(t, st, accepted, func(s *resources.MachineIntentSpec) { s.Allocation = &resources.Allocation{ID: "a1"} })
	eventually(t, st, accepted, func(ps *resources.PowerStatus) bool {
		return ps.TypedSpec().LastAction == "pxe+on" && ps.TypedSpec().State == resources.PowerOn
	})

	// A reboot request: PXE once, then a cycle, once.
	setIntent(t, st, accepted, func(s *resources.MachineIntentSpec) { s.RebootID = "r1" })
	eventually(t, st, accepted, func(ps *resources.PowerStatus) bool {
		return ps.TypedSpec().RebootID == "r1" && ps.TypedSpec().State == resources.PowerOn
	})

	time.Sleep(3 * time.Second) // a few more rounds: nothing more is done

	log := strings.Join(bmcs.log(), " ")
	assert.NotContains(t, log, "2:", "a pending machine's BMC is never called")
	assert.NotContains(t, log, "3:", "a rejected machine's BMC is never called")
	assert.Equal(t, 1, strings.Count(log, "1:cycle"), "the reboot is done once: %s", log)
	assert.Equal(t, 1, strings.Count(log, "1:off"), log)
	assert.Regexp(t, `1:off .*1:pxe 1:on .*1:pxe 1:cycle`, log)
	assert.NotContains(t, log, "4:off", "nothing is done to a BMC that is down")
}
