package replica

import (
	"context"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// Members are the replicas of a site that run now: each registers its name and version
// under the site's prefix on a lease of its own, gone when it stops or dies.
type Members struct {
	Client *clientv3.Client
	// Prefix is the registrations' etcd prefix ("/anvil/site-a/replicas").
	Prefix string
	// TTL is the registration's lease (0: DefaultTTL).
	TTL time.Duration
}

// Join registers this replica as name running version, once no running replica runs
// another minor version: the replicas of a site decide boots, orders and power with
// the same lifecycle rules, and a rule that changed between minor versions would have
// two replicas disagree. Patch versions mix (a rolling upgrade: followers first, the
// leader last); a minor version is upgraded by stopping every replica first. The
// registration lasts until ctx is done or Close.
func (m *Members) Join(ctx context.Context, name, version string) (*concurrency.Session, error) {
	if err := m.check(ctx, name, version); err != nil {
		return nil, err
	}

	ttl := m.TTL
	if ttl <= 0 {
		ttl = DefaultTTL
	}

	session, err := concurrency.NewSession(m.Client, concurrency.WithTTL(int(ttl/time.Second)), concurrency.WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("error registering the replica: %w", err)
	}

	key := m.Prefix + "/" + name

	// A name a running replica holds is refused: two replicas of one name would be one
	// to operators. A replica started again right after it died finds its own former
	// registration, which its lease ends within a TTL: it waits that long.
	deadline := time.Now().Add(ttl + 2*time.Second)

	for {
		resp, err := m.Client.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, version, clientv3.WithLease(session.Lease()))).
			Commit()
		if err != nil {
			session.Close()

			return nil, fmt.Errorf("error registering the replica: %w", err)
		}

		if resp.Succeeded {
			return session, nil
		}

		if time.Now().After(deadline) {
			session.Close()

			return nil, fmt.Errorf("another running replica of this site is named %q: give each its own --replica-name", name)
		}

		select {
		case <-ctx.Done():
			session.Close()

			return nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// check refuses version while a running replica runs another minor version.
func (m *Members) check(ctx context.Context, name, version string) error {
	running, err := m.Running(ctx)
	if err != nil {
		return err
	}

	for other, v := range running {
		// Its own former registration (it died a moment ago) is no other replica.
		if other != name && minor(v) != minor(version) {
			return fmt.Errorf("replica %s runs %s, this one %s: a site runs one minor version at a time "+
				"(stop every replica, then start them on the new one); patch versions mix", other, v, version)
		}
	}

	return nil
}

// Running returns the running replicas' versions by name.
func (m *Members) Running(ctx context.Context) (map[string]string, error) {
	resp, err := m.Client.Get(ctx, m.Prefix+"/", clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("error reading the site's replicas: %w", err)
	}

	running := make(map[string]string, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		running[strings.TrimPrefix(string(kv.Key), m.Prefix+"/")] = string(kv.Value)
	}

	return running, nil
}

// minor is a version's major.minor ("v1.4.2" → "v1.4"); a version that is not one
// (a development build, "dev") is itself.
func minor(version string) string {
	parts := strings.SplitN(strings.TrimPrefix(version, "v"), ".", 3)
	if len(parts) < 2 || parts[0] == "" || parts[1] == "" {
		return version
	}

	return parts[0] + "." + parts[1]
}
