package orders_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/anvil-metal/anvil/agent/internal/orders"
	agentv1 "github.com/anvil-metal/anvil/api/agent/v1"
)

// fakeActions records what the orders did to the "machine".
type fakeActions struct {
	mu       sync.Mutex
	calls    []string
	wipeErr  error
	kexecErr error
	release  chan struct{} // when set, Wipe waits for it
}

func (f *fakeActions) record(call string) {
	f.mu.Lock()
	defer f.mu.Unlock()

	f.calls = append(f.calls, call)
}

func (f *fakeActions) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()

	return append([]string(nil), f.calls...)
}

func (f *fakeActions) Reboot(context.Context) error   { f.record("reboot"); return nil }   //nolint:nlreturn // a one-line fake
func (f *fakeActions) PowerOff(context.Context) error { f.record("poweroff"); return nil } //nolint:nlreturn // a one-line fake
func (f *fakeActions) LoadKexec(_ context.Context, k *agentv1.Kexec) error {
	f.record("load " + k.GetKernelUrl())

	if f.kexecErr != nil {
		return f.kexecErr
	}

	return nil
}

func (f *fakeActions) JumpKexec(context.Context) error { f.record("jump"); return nil } //nolint:nlreturn // a one-line fake

func (f *fakeActions) Wipe(ctx context.Context, w *agentv1.Wipe) (*agentv1.WipeReport, error) {
	f.record("wipe " + w.GetGenerationId())

	if f.release != nil {
		select {
		case <-f.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}

	if f.wipeErr != nil {
		return nil, f.wipeErr
	}

	return &agentv1.WipeReport{GenerationId: w.GetGenerationId(), Disks: []*agentv1.DiskWipe{{Device: "vda", Method: "fast"}}}, nil
}

func (f *fakeActions) GetBMC(context.Context) (*agentv1.BMCInfo, error) {
	f.record("get-bmc")

	return &agentv1.BMCInfo{Address: "10.0.0.9", Port: 623}, nil
}

func (f *fakeActions) SetBMC(_ context.Context, s *agentv1.SetBMC) (*agentv1.BMCInfo, error) {
	f.record("set-bmc " + s.GetUser())

	return &agentv1.BMCInfo{Address: "10.0.0.9", Port: 623, User: s.GetUser()}, nil
}

func run(t *testing.T, actions orders.Actions) *orders.Executor {
	t.Helper()

	e := orders.New(actions, zaptest.NewLogger(t))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})

	go func() {
		e.Run(ctx)
		close(done)
	}()

	t.Cleanup(func() {
		cancel()
		<-done
	})

	return e
}

func waitStatus(t *testing.T, e *orders.Executor, id string, want agentv1.OrderResult_Status) *agentv1.OrderResult {
	t.Helper()

	var got *agentv1.OrderResult

	require.Eventually(t, func() bool {
		for _, r := range e.Results() {
			if r.GetOrderId() == id && r.GetStatus() == want {
				got = r

				return true
			}
		}

		return false
	}, 5*time.Second, time.Millisecond, "order %s never reached %s", id, want)

	return got
}

func TestEachOrder(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		order *agentv1.Order
		calls []string
		check func(*testing.T, *agentv1.OrderResult)
	}{
		{order: &agentv1.Order{Id: "hold", Action: &agentv1.Order_Hold{Hold: &agentv1.Hold{}}}},
		{order: &agentv1.Order{Id: "release", Action: &agentv1.Order_Release{Release: &agentv1.Release{}}}},
		{order: &agentv1.Order{Id: "release-reboot", Action: &agentv1.Order_Release{Release: &agentv1.Release{Then: agentv1.Release_THEN_REBOOT}}}, calls: []string{"reboot"}},
		{order: &agentv1.Order{Id: "release-off", Action: &agentv1.Order_Release{Release: &agentv1.Release{Then: agentv1.Release_THEN_POWER_OFF}}}, calls: []string{"poweroff"}},
		{
			order: &agentv1.Order{Id: "wipe-1", Action: &agentv1.Order_Wipe{Wipe: &agentv1.Wipe{GenerationId: "g1"}}}, calls: []string{"wipe g1"},
			check: func(t *testing.T, r *agentv1.OrderResult) { assert.Equal(t, "g1", r.GetWipe().GetGenerationId()) },
		},
		{order: &agentv1.Order{Id: "reboot", Action: &agentv1.Order_Reboot{Reboot: &agentv1.Reboot{}}}, calls: []string{"reboot"}},
		{order: &agentv1.Order{Id: "off", Action: &agentv1.Order_PowerOff{PowerOff: &agentv1.PowerOff{}}}, calls: []string{"poweroff"}},
		{
			order: &agentv1.Order{Id: "bmc", Action: &agentv1.Order_GetBmc{GetBmc: &agentv1.GetBMC{}}}, calls: []string{"get-bmc"},
			check: func(t *testing.T, r *agentv1.OrderResult) { assert.Equal(t, "10.0.0.9", r.GetBmc().GetAddress()) },
		},
		{
			order: &agentv1.Order{Id: "set-bmc", Action: &agentv1.Order_SetBmc{SetBmc: &agentv1.SetBMC{User: "anvil", Password: "pw"}}}, calls: []string{"set-bmc anvil"},
			check: func(t *testing.T, r *agentv1.OrderResult) { assert.Equal(t, "anvil", r.GetBmc().GetUser()) },
		},
	} {
		t.Run(tc.order.GetId(), func(t *testing.T) {
			t.Parallel()

			actions := &fakeActions{}
			e := run(t, actions)

			require.NoError(t, e.Handle(tc.order))
			r := waitStatus(t, e, tc.order.GetId(), agentv1.OrderResult_STATUS_DONE)
			assert.Equal(t, tc.calls, actions.Calls())

			if tc.check != nil {
				tc.check(t, r)
			}
		})
	}
}

// TestKexecReportsBeforeJump: the order is reported done once the kernel is loaded, and
// the jump waits for that report to be sent; a kernel that does not load is no jump.
func TestKexecReportsBeforeJump(t *testing.T) {
	t.Parallel()

	kexec := &agentv1.Order{Id: "kexec", Action: &agentv1.Order_Kexec{Kexec: &agentv1.Kexec{KernelUrl: "http://p/k"}}}

	actions := &fakeActions{}
	e := run(t, actions)

	require.NoError(t, e.Handle(kexec))
	r := waitStatus(t, e, "kexec", agentv1.OrderResult_STATUS_DONE)
	assert.Equal(t, "next kernel loaded: jumping", r.GetMessage())

	time.Sleep(50 * time.Millisecond)
	assert.Equal(t, []string{"load http://p/k"}, actions.Calls(), "no jump before the outcome is sent")

	e.Reported(r)
	require.Eventually(t, func() bool { return len(actions.Calls()) == 2 }, 5*time.Second, 10*time.Millisecond)
	assert.Equal(t, []string{"load http://p/k", "jump"}, actions.Calls())

	failing := &fakeActions{kexecErr: errors.New("digest mismatch")}
	e = run(t, failing)

	require.NoError(t, e.Handle(kexec))
	r = waitStatus(t, e, "kexec", agentv1.OrderResult_STATUS_FAILED)
	assert.Contains(t, r.GetMessage(), "digest mismatch")
	time.Sleep(50 * time.Millisecond)
	assert.Equal(t, []string{"load http://p/k"}, failing.Calls())
}

// TestOrdersAreIdempotent: an order seen again is not carried out again.
func TestOrdersAreIdempotent(t *testing.T) {
	t.Parallel()

	actions := &fakeActions{release: make(chan struct{})}
	e := run(t, actions)
	wipe := &agentv1.Order{Id: "wipe-g1", Action: &agentv1.Order_Wipe{Wipe: &agentv1.Wipe{GenerationId: "g1"}}}

	require.NoError(t, e.Handle(wipe))
	require.NoError(t, e.Handle(wipe), "sent again while running (a reconnect)")
	waitStatus(t, e, "wipe-g1", agentv1.OrderResult_STATUS_RUNNING)

	close(actions.release)
	waitStatus(t, e, "wipe-g1", agentv1.OrderResult_STATUS_DONE)

	require.NoError(t, e.Handle(wipe), "sent again after it finished (a provider restart)")
	time.Sleep(50 * time.Millisecond)
	assert.Equal(t, []string{"wipe g1"}, actions.Calls())
	assert.Len(t, e.Results(), 1)
}

func TestFailedOrder(t *testing.T) {
	t.Parallel()

	e := run(t, &fakeActions{wipeErr: errors.New("disk vanished")})

	require.NoError(t, e.Handle(&agentv1.Order{Id: "w", Action: &agentv1.Order_Wipe{Wipe: &agentv1.Wipe{GenerationId: "g"}}}))
	r := waitStatus(t, e, "w", agentv1.OrderResult_STATUS_FAILED)
	assert.Contains(t, r.GetMessage(), "disk vanished")

	assert.Error(t, e.Handle(&agentv1.Order{Id: "x"}), "an order without action")
}

// An order that is done at once (a hold) stays done: "queued" is never recorded over
// its outcome, however the executor's goroutine is scheduled.
func TestQueuedNeverOverwritesDone(t *testing.T) {
	t.Parallel()

	for i := range 200 {
		e := run(t, &fakeActions{})
		id := fmt.Sprintf("hold-%d", i)

		require.NoError(t, e.Handle(&agentv1.Order{Id: id, Action: &agentv1.Order_Hold{Hold: &agentv1.Hold{}}}))
		waitStatus(t, e, id, agentv1.OrderResult_STATUS_DONE)

		// Handle has returned and the hold is done: nothing may change it back.
		time.Sleep(time.Millisecond)

		results := e.Results()
		require.Len(t, results, 1)
		require.Equal(t, agentv1.OrderResult_STATUS_DONE, results[0].GetStatus(), "run %d", i)
	}
}
