package replica

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/cosi-project/runtime/pkg/state"
	"github.com/cosi-project/state-etcd/pkg/state/impl/etcd"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// unlockTimeout bounds an unlock: a holder cut off from etcd loses the lock with its
// session's lease all the same.
const unlockTimeout = 3 * time.Second

// Mutex is a lock the replicas of a site share (the transitions': a rule such as "an
// owner holds one machine" reads other machines, so two replicas must not decide at
// once). Its holder writes through a state fenced by its hold: should its session's
// lease expire while it holds the lock (a pause, a partition), its late writes are
// refused by etcd once another replica has taken the lock.
type Mutex struct {
	Client *clientv3.Client
	// Key is the lock's etcd prefix ("/anvil/site-a/locks/transitions").
	Key string
	// TTL is the session's lease (0: DefaultTTL).
	TTL time.Duration
	// Fenced returns the state as a writer through a fenced KV sees it.
	Fenced func(etcd.Client) (state.State, error)

	mu      sync.Mutex
	session *concurrency.Session
}

// Lock takes the lock, waiting for it within ctx.
func (m *Mutex) Lock(ctx context.Context) (state.State, func(), error) {
	session, err := m.liveSession(ctx)
	if err != nil {
		return nil, nil, err
	}

	mx := concurrency.NewMutex(session, m.Key)
	if err = mx.Lock(ctx); err != nil {
		return nil, nil, fmt.Errorf("error taking lock %s: %w", m.Key, err)
	}

	unlock := func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unlockTimeout)
		defer cancel()

		_ = mx.Unlock(ctx) // on failure the lease ends the hold all the same
	}

	held, err := m.Client.Get(ctx, mx.Key())
	if err != nil || len(held.Kvs) == 0 {
		unlock()

		return nil, nil, fmt.Errorf("error reading lock %s: %v", m.Key, err)
	}

	st, err := m.Fenced(Fence(m.Client, mx.Key(), held.Kvs[0].CreateRevision, nil))
	if err != nil {
		unlock()

		return nil, nil, err
	}

	return st, unlock, nil
}

// liveSession returns the session the lock is held under, made anew once it ended.
func (m *Mutex) liveSession(ctx context.Context) (*concurrency.Session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()

	if m.session != nil {
		select {
		case <-m.session.Done():
			m.session = nil
		default:
			return m.session, nil
		}
	}

	ttl := m.TTL
	if ttl <= 0 {
		ttl = DefaultTTL
	}

	session, err := concurrency.NewSession(m.Client, concurrency.WithTTL(int(ttl/time.Second)), concurrency.WithContext(context.WithoutCancel(ctx)))
	if err != nil {
		return nil, fmt.Errorf("error starting a lock session: %w", err)
	}

	m.session = session

	return session, nil
}

// Close ends the session (and any hold with it).
func (m *Mutex) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()

	if m.session == nil {
		return nil
	}

	err := m.session.Close()
	m.session = nil

	return err
}
