// Package orders carries out the provider's orders: one at a time, each once per order
// ID, outliving the session that brought it (an agent keeps executing an order it has
// accepted while it reconnects), each with its outcome kept to be reported again.
package orders

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	agentv1 "github.com/anvil-metal/anvil/api/agent/v1"
)

// Actions are what orders do to the machine.
type Actions interface {
	Reboot(ctx context.Context) error
	PowerOff(ctx context.Context) error
	// LoadKexec downloads, checks and loads the next kernel; JumpKexec boots into it.
	// Apart, so that the order is reported done between them: once the jump is made,
	// nothing more is said.
	LoadKexec(ctx context.Context, k *agentv1.Kexec) error
	JumpKexec(ctx context.Context) error
	Wipe(ctx context.Context, w *agentv1.Wipe) (*agentv1.WipeReport, error)
	GetBMC(ctx context.Context) (*agentv1.BMCInfo, error)
	SetBMC(ctx context.Context, s *agentv1.SetBMC) (*agentv1.BMCInfo, error)
}

// reportWait bounds how long a kexec waits for its outcome to be sent before it jumps:
// the provider learns of the jump from it, but a provider out of reach must not keep
// the machine from booting.
const reportWait = 5 * time.Second

// jumpGrace is how long a kexec waits after its outcome was sent before it jumps. Sent
// means handed to the transport, not on the wire: a jump at once can take the frame down
// with the old kernel's network stack (seen in the lab: the provider never heard
// "loaded"). A second lets it leave and be acknowledged, even under TCG.
const jumpGrace = time.Second

// queueSize bounds the orders waiting: the provider sends one at a time.
const queueSize = 16

// Executor carries out orders.
type Executor struct {
	actions Actions
	logger  *zap.Logger
	queue   chan *agentv1.Order

	mu       sync.Mutex
	results  map[string]*agentv1.OrderResult
	sequence []string // order IDs in arrival order
	changed  chan struct{}
	// reported is each order's outcome as last sent to the provider (Reported).
	reported map[string]*agentv1.OrderResult
	// onStart, when set, is told of each order as its execution begins.
	onStart func(o *agentv1.Order)
}

// New returns an executor; Run carries out what Handle queues.
func New(actions Actions, logger *zap.Logger) *Executor {
	return &Executor{
		actions:  actions,
		logger:   logger,
		queue:    make(chan *agentv1.Order, queueSize),
		results:  map[string]*agentv1.OrderResult{},
		reported: map[string]*agentv1.OrderResult{},
		changed:  make(chan struct{}),
	}
}

// OnStart has start called as each order's execution begins (the fleet simulator's
// events); call it before Run.
func (e *Executor) OnStart(start func(o *agentv1.Order)) { e.onStart = start }

// Reported records that an outcome reached the provider's stream.
func (e *Executor) Reported(r *agentv1.OrderResult) {
	e.mu.Lock()
	e.reported[r.GetOrderId()] = r
	e.mu.Unlock()

	e.touch()
}

// awaitReported waits until r was sent, or for at most reportWait, and says whether it was.
func (e *Executor) awaitReported(ctx context.Context, r *agentv1.OrderResult) (sent bool) {
	timer := time.NewTimer(reportWait)
	defer timer.Stop()

	for {
		changed := e.Changed()

		e.mu.Lock()
		sent := proto.Equal(e.reported[r.GetOrderId()], r)
		e.mu.Unlock()

		if sent {
			return true
		}

		select {
		case <-changed:
		case <-timer.C:
			e.logger.Warn("the outcome was not sent in time; going on", zap.String("order", r.GetOrderId()))

			return false
		case <-ctx.Done():
			return false
		}
	}
}

// Handle accepts an order. An order already seen is not carried out again; its last
// outcome is reported again instead.
func (e *Executor) Handle(o *agentv1.Order) error {
	if o.GetId() == "" || o.GetAction() == nil {
		return fmt.Errorf("order %q has no id or no action", o.GetId())
	}

	e.mu.Lock()
	_, seen := e.results[o.GetId()]

	if !seen {
		// "queued" is recorded before the order can run: recorded after, it could
		// overwrite the outcome of an order that ran at once (a hold).
		if len(e.queue) == cap(e.queue) {
			e.mu.Unlock()

			return fmt.Errorf("too many orders waiting, %q refused", o.GetId())
		}

		e.results[o.GetId()] = &agentv1.OrderResult{OrderId: o.GetId(), Status: agentv1.OrderResult_STATUS_RUNNING, Message: "queued"}
		e.sequence = append(e.sequence, o.GetId())
		e.queue <- o // room checked under e.mu, and only Handle sends
	}
	e.mu.Unlock()

	e.touch()

	return nil
}

// Run carries out orders until ctx is done.
func (e *Executor) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case o := <-e.queue:
			e.execute(ctx, o)
		}
	}
}

// Results returns every order's last outcome, in arrival order.
func (e *Executor) Results() []*agentv1.OrderResult {
	e.mu.Lock()
	defer e.mu.Unlock()

	out := make([]*agentv1.OrderResult, 0, len(e.sequence))
	for _, id := range e.sequence {
		out = append(out, proto.Clone(e.results[id]).(*agentv1.OrderResult)) //nolint:forcetypeassert // a clone has its original's type
	}

	return out
}

// Changed returns a channel closed at the next change of any outcome.
func (e *Executor) Changed() <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()

	return e.changed
}

func (e *Executor) set(r *agentv1.OrderResult) {
	e.mu.Lock()

	if _, ok := e.results[r.GetOrderId()]; !ok {
		e.sequence = append(e.sequence, r.GetOrderId())
	}

	e.results[r.GetOrderId()] = r
	e.mu.Unlock()

	e.touch()
}

func (e *Executor) touch() {
	e.mu.Lock()
	defer e.mu.Unlock()

	close(e.changed)
	e.changed = make(chan struct{})
}

func (e *Executor) execute(ctx context.Context, o *agentv1.Order) {
	id := o.GetId()
	logger := e.logger.With(zap.String("order", id))

	if e.onStart != nil {
		e.onStart(o)
	}

	running := func(msg string) {
		e.set(&agentv1.OrderResult{OrderId: id, Status: agentv1.OrderResult_STATUS_RUNNING, Message: msg})
	}

	result := &agentv1.OrderResult{OrderId: id, Status: agentv1.OrderResult_STATUS_DONE}

	var err error

	switch a := o.GetAction().(type) {
	case *agentv1.Order_Hold:
		result.Message = "holding: touching nothing"
	case *agentv1.Order_Release:
		switch a.Release.GetThen() {
		case agentv1.Release_THEN_REBOOT:
			running("released: rebooting")
			err = e.actions.Reboot(ctx)
		case agentv1.Release_THEN_POWER_OFF:
			running("released: powering off")
			err = e.actions.PowerOff(ctx)
		default:
			result.Message = "released"
		}
	case *agentv1.Order_Wipe:
		running("wiping disks")

		result.Wipe, err = e.actions.Wipe(ctx, a.Wipe)
		result.Message = "disks wiped"
	case *agentv1.Order_Reboot:
		running("rebooting")
		err = e.actions.Reboot(ctx)
	case *agentv1.Order_PowerOff:
		running("powering off")
		err = e.actions.PowerOff(ctx)
	case *agentv1.Order_Kexec:
		running("loading the next kernel")

		if err = e.actions.LoadKexec(ctx, a.Kexec); err == nil {
			// Done is said before the jump, while it can still be said.
			result.Message = "next kernel loaded: jumping"
			e.set(result)

			if e.awaitReported(ctx, result) {
				select {
				case <-time.After(jumpGrace):
				case <-ctx.Done():
				}
			}

			if err = e.actions.JumpKexec(ctx); err == nil {
				return
			}
		}
	case *agentv1.Order_GetBmc:
		result.Bmc, err = e.actions.GetBMC(ctx)
	case *agentv1.Order_SetBmc:
		result.Bmc, err = e.actions.SetBMC(ctx, a.SetBmc)
	default:
		err = fmt.Errorf("unknown order")
	}

	if err != nil {
		result = &agentv1.OrderResult{OrderId: id, Status: agentv1.OrderResult_STATUS_FAILED, Message: err.Error()}
		logger.Warn("order failed", zap.Error(err))
	} else {
		logger.Info("order done", zap.String("message", result.GetMessage()))
	}

	e.set(result)
}
