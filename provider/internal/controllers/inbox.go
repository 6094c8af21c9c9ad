package controllers

import (
	"context"
	"sync/atomic"

	"github.com/cosi-project/runtime/pkg/controller"
)

// inbox hands reports to the controller that stores them and waits for it to have
// stored them, so that a report acknowledged to whoever made it is never lost.
type inbox[T any] struct {
	ch chan acked[T]
	// held is a report taken but not stored when the controller runtime stopped: the
	// next run stores it first, its sender still waiting.
	held atomic.Pointer[acked[T]]
}

type acked[T any] struct {
	report T
	done   chan error
}

func newInbox[T any]() *inbox[T] { return &inbox[T]{ch: make(chan acked[T])} }

// send delivers the report and returns what storing it returned.
func (in *inbox[T]) send(ctx context.Context, report T) error {
	a := acked[T]{report: report, done: make(chan error, 1)}

	select {
	case in.ch <- a:
	case <-ctx.Done():
		return ctx.Err()
	}

	select {
	case err := <-a.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// serve stores reports with store until ctx is done; runtime events are drained. A
// report whose storing ctx cut short is held for the next serve: a restart of the
// controller runtime loses none.
func (in *inbox[T]) serve(ctx context.Context, events <-chan controller.ReconcileEvent, store func(T) error) {
	for {
		a := in.held.Swap(nil)

		if a == nil {
			select {
			case <-ctx.Done():
				return
			case <-events:
				continue
			case next := <-in.ch:
				a = &next
			}
		}

		err := store(a.report)
		if err != nil && ctx.Err() != nil {
			in.held.Store(a)

			return
		}

		a.done <- err
	}
}

// takeHeld returns the report a stopped run held, if any, for a controller that waits
// on reports beside other inputs (reports, finish) instead of serve.
func (in *inbox[T]) takeHeld() *acked[T] { return in.held.Swap(nil) }

// reports is where reports arrive.
func (in *inbox[T]) reports() <-chan acked[T] { return in.ch }

// finish acknowledges the report with what storing it returned; a report whose storing
// ctx cut short is held for the next run instead, and finish says so.
func (in *inbox[T]) finish(ctx context.Context, a *acked[T], err error) bool {
	if err != nil && ctx.Err() != nil {
		in.held.Store(a)

		return true
	}

	a.done <- err

	return false
}
