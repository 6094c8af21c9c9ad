package controllers

import (
	"context"
	"errors"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"

	infrav1 "github.com/anvil-metal/anvil/api/infrastructure/v1beta1"
	"github.com/anvil-metal/anvil/provider/internal/capi/anvilclient"
)

// unreachableRetry is how soon a reconcile that could not reach Anvil runs again.
const unreachableRetry = 15 * time.Second

// ServerWatch feeds the Server reconciler: every machine Anvil changes, every machine
// Anvil has when the watch (re)starts, and every Server there is then (so that one whose
// machine Anvil forgot while the manager was away goes). It is a manager Runnable; it
// watches again after a failure until its context ends.
type ServerWatch struct {
	Client  client.Reader
	Anvil   *anvilclient.Client
	Changes chan<- event.GenericEvent
	// Retry is the wait between watches (anvilclient.RetryAfter when zero).
	Retry time.Duration
}

// Start implements manager.Runnable.
func (w *ServerWatch) Start(ctx context.Context) error {
	logger := log.FromContext(ctx).WithName("server-watch")
	retry := w.Retry

	if retry == 0 {
		retry = anvilclient.RetryAfter
	}

	for {
		// An error once ctx ended is the stop's own: not worth a word.
		if err := w.watch(ctx); err != nil && ctx.Err() == nil {
			if errors.Is(err, anvilclient.ErrUnreachable) {
				logger.V(1).Info("Anvil unreachable, watching again", "error", err.Error())
			} else {
				logger.Error(err, "watching Anvil's machines failed, watching again")
			}
		}

		select {
		case <-ctx.Done():
			return nil
		case <-time.After(retry):
		}
	}
}

func (w *ServerWatch) watch(ctx context.Context) error {
	var servers infrav1.ServerList
	if err := w.Client.List(ctx, &servers); err != nil {
		return err
	}

	for _, s := range servers.Items {
		if !w.send(ctx, s.Name) {
			return nil
		}
	}

	ids := make(chan string)
	done := make(chan error, 1)

	go func() { done <- w.Anvil.Watch(ctx, ids) }()

	for {
		select {
		case err := <-done:
			return err
		case id := <-ids:
			if !w.send(ctx, id) {
				return <-done
			}
		}
	}
}

func (w *ServerWatch) send(ctx context.Context, name string) bool {
	select {
	case w.Changes <- event.GenericEvent{Object: &infrav1.Server{ObjectMeta: metav1.ObjectMeta{Name: name}}}:
		return true
	case <-ctx.Done():
		return false
	}
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: only the leader writes.
func (w *ServerWatch) NeedLeaderElection() bool { return true }
