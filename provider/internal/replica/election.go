package replica

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/cosi-project/state-etcd/pkg/state/impl/etcd"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
)

// DefaultTTL is the leader lease's time to live: a dead leader is replaced after about
// this long.
const DefaultTTL = 10 * time.Second

// Election elects one replica of a site to lead.
type Election struct {
	Client *clientv3.Client
	// Prefix is the election's etcd prefix ("/anvil/site-a/leader").
	Prefix string
	// Name says who this replica is, to the others and to operators.
	Name string
	// TTL is the lease's time to live (0: DefaultTTL), in whole seconds.
	TTL time.Duration
	// Metrics counts terms and refused writes (nil: none).
	Metrics *Metrics
	Logger  *zap.Logger
}

// Term is one replica's time as the leader.
type Term struct {
	// KV is the fenced KV every leader write goes through.
	KV etcd.Client
	// Key and Rev are the election key this replica holds and its create revision.
	Key string
	Rev int64

	ttl     time.Duration
	renewed atomic.Int64 // unix nanoseconds of the lease's last renewal seen
}

// Margin is how long before the lease can have expired the leader stops acting: a
// renewal seen at t says the lease lives until about t+TTL by etcd's clock; the margin
// covers the renewal's round trip and the clocks' drift over a TTL.
func (t *Term) margin() time.Duration { return max(t.ttl/4, time.Second) }

// MayAct says whether the leader may take an action etcd cannot fence (a BMC call): only
// while its lease is certainly alive. It errs once the last renewal is older than the
// TTL less the margin.
func (t *Term) MayAct() error {
	last := time.Unix(0, t.renewed.Load())
	if age := time.Since(last); age > t.ttl-t.margin() {
		return fmt.Errorf("the leader lease was last renewed %s ago: not acting until it is again", age.Round(time.Millisecond))
	}

	return nil
}

// Run campaigns until ctx is done. Each time this replica is elected, lead runs with
// the term until the term ends — the lease lost (etcd unreachable for a TTL), another
// replica seen leading, or lead returning — then its context is cancelled, it is waited
// for, leadership is resigned, and the replica campaigns again.
func (e *Election) Run(ctx context.Context, lead func(context.Context, *Term) error) error {
	ttl := e.TTL
	if ttl <= 0 {
		ttl = DefaultTTL
	}

	ttl = ttl.Round(time.Second)
	if ttl < 2*time.Second {
		return fmt.Errorf("leader lease TTL %s is under 2 s", ttl)
	}

	for {
		err := e.term(ctx, ttl, lead)

		if ctx.Err() != nil {
			return nil //nolint:nilerr // stopping is not a failure
		}

		if err != nil {
			e.Logger.Warn("leadership ended", zap.Error(err))
		}

		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}

// term campaigns once and, elected, leads until the term ends.
func (e *Election) term(ctx context.Context, ttl time.Duration, lead func(context.Context, *Term) error) error {
	lease, err := e.Client.Grant(ctx, int64(ttl/time.Second))
	if err != nil {
		return fmt.Errorf("error granting the election lease: %w", err)
	}

	sessionCtx, stopSession := context.WithCancel(ctx)
	defer stopSession()

	t := &Term{ttl: ttl}
	t.renewed.Store(time.Now().UnixNano())

	// Our own keepalive channel beside the session's: the gate needs to know when the
	// lease was last renewed, which the session does not tell.
	renewals, err := e.Client.KeepAlive(sessionCtx, lease.ID)
	if err != nil {
		return fmt.Errorf("error keeping the election lease alive: %w", err)
	}

	lost := make(chan struct{})

	go func() {
		defer close(lost)

		for range renewals {
			t.renewed.Store(time.Now().UnixNano())
		}
	}()

	session, err := concurrency.NewSession(e.Client, concurrency.WithLease(lease.ID), concurrency.WithContext(sessionCtx))
	if err != nil {
		return fmt.Errorf("error starting the election session: %w", err)
	}

	defer func() {
		// Revoking the lease lets another replica take over at once.
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()

		if _, err := e.Client.Revoke(closeCtx, lease.ID); err != nil {
			e.Logger.Debug("error revoking the election lease", zap.Error(err))
		}
	}()

	election := concurrency.NewElection(session, e.Prefix)

	if err = election.Campaign(ctx, e.Name); err != nil {
		return fmt.Errorf("error campaigning: %w", err)
	}

	t.Key, t.Rev = election.Key(), election.Rev()
	t.KV = Fence(e.Client, t.Key, t.Rev, e.Metrics.fencedWrite)

	e.Logger.Info("elected leader", zap.String("key", t.Key), zap.Int64("revision", t.Rev))
	e.Metrics.elected()

	defer e.Metrics.deposed()

	leadCtx, stopLead := context.WithCancel(ctx)
	defer stopLead()

	done := make(chan error, 1)

	go func() { done <- lead(leadCtx, t) }()

	why, returned := e.watchTerm(leadCtx, session, election, t, lost, done)

	stopLead()

	if !returned {
		// The leader's work stops before this replica resigns for another to lead.
		if err := <-done; err != nil {
			e.Logger.Debug("the leader's work stopped", zap.Error(err))
		}
	}

	resignCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()

	if err := election.Resign(resignCtx); err != nil {
		e.Logger.Debug("error resigning", zap.Error(err))
	}

	return why
}

// watchTerm waits until the term must end: the session or its lease lost, another
// replica observed as leader, or lead returned (returned then says so).
func (e *Election) watchTerm(ctx context.Context, session *concurrency.Session, election *concurrency.Election, t *Term,
	lost <-chan struct{}, done <-chan error,
) (why error, returned bool) {
	observed := election.Observe(ctx)

	for {
		select {
		case <-ctx.Done():
			return nil, false
		case err := <-done:
			if err == nil {
				err = errors.New("returned")
			}

			return fmt.Errorf("the leader's work: %w", err), true
		case <-session.Done():
			return errors.New("the election session ended (etcd unreachable for a lease TTL?)"), false
		case <-lost:
			return errors.New("the election lease is no longer renewed"), false
		case resp, ok := <-observed:
			if !ok {
				return errors.New("stopped observing the election"), false
			}

			if len(resp.Kvs) > 0 && (string(resp.Kvs[0].Key) != t.Key || resp.Kvs[0].CreateRevision != t.Rev) {
				return fmt.Errorf("etcd names another leader: %s", resp.Kvs[0].Value), false
			}
		}
	}
}

// Leader returns the name of the replica leading under prefix, "" when none does.
func Leader(ctx context.Context, cli *clientv3.Client, prefix string) (string, error) {
	resp, err := cli.Get(ctx, prefix+"/", clientv3.WithFirstCreate()...)
	if err != nil {
		return "", fmt.Errorf("error reading the election: %w", err)
	}

	if len(resp.Kvs) == 0 {
		return "", nil
	}

	return string(resp.Kvs[0].Value), nil
}
