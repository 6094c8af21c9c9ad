package controllers

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestInboxHoldsAcrossRestarts: a report whose storing is cut short by the runtime
// stopping is stored by the next run, and only then acknowledged to its sender.
func TestInboxHoldsAcrossRestarts(t *testing.T) {
	t.Parallel()

	in := newInbox[string]()
	events := make(chan controller.ReconcileEvent)

	sent := make(chan error, 1)

	go func() { sent <- in.send(t.Context(), "wiped") }()

	// The first run takes the report, and stops while storing it.
	first, stop := context.WithCancel(t.Context())
	started := make(chan struct{})

	go in.serve(first, events, func(string) error {
		close(started)
		<-first.Done()

		return first.Err()
	})

	<-started
	stop()

	select {
	case err := <-sent:
		t.Fatalf("acknowledged before it was stored: %v", err)
	case <-time.After(50 * time.Millisecond):
	}

	// The next run stores it first.
	second, cancel := context.WithCancel(t.Context())
	defer cancel()

	stored := make(chan string, 1)

	go in.serve(second, events, func(r string) error {
		stored <- r

		return nil
	})

	assert.Equal(t, "wiped", <-stored)
	require.NoError(t, <-sent)

	cancel()
}

// TestInboxFailure: a failure that is not the runtime stopping goes back to the sender.
func TestInboxFailure(t *testing.T) {
	t.Parallel()

	in := newInbox[string]()
	failing := errors.New("disk full")

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()

	go in.serve(ctx, nil, func(string) error { return failing })

	require.ErrorIs(t, in.send(t.Context(), "wiped"), failing)
}
