package controllers

import "context"

// inbox hands reports to the controller that stores them and waits for it to have
// stored them, so that a report acknowledged to whoever made it is never lost.
type inbox[T any] chan acked[T]

type acked[T any] struct {
	report T
	done   chan error
}

func newInbox[T any]() inbox[T] { return make(inbox[T]) }

// send delivers the report and returns what storing it returned.
func (in inbox[T]) send(ctx context.Context, report T) error {
	a := acked[T]{report: report, done: make(chan error, 1)}

	select {
	case in <- a:
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
