package replica

import (
	"context"
	"errors"
	"fmt"

	"github.com/cosi-project/state-etcd/pkg/state/impl/etcd"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrFenced is a write refused because its writer no longer leads: the election key it
// was elected with is gone or another's.
var ErrFenced = errors.New("write refused by etcd: this replica no longer leads")

// fencedKV is a KV whose every transaction also asks etcd that the leader's election key
// still be the one this replica was elected with (its create revision): a leader deposed
// while a write was on its way has it refused by etcd itself, not by a check in Go that
// could pass a moment before the lease expired.
type fencedKV struct {
	etcd.Client

	key string
	rev int64
	// refused counts the writes the fence refused.
	refused func()
}

// Fence returns cli fenced by the election key key created at revision rev.
func Fence(cli etcd.Client, key string, rev int64, refused func()) etcd.Client {
	if refused == nil {
		refused = func() {}
	}

	return &fencedKV{Client: cli, key: key, rev: rev, refused: refused}
}

// Txn implements clientv3.KV.
func (f *fencedKV) Txn(ctx context.Context) clientv3.Txn {
	return &fencedTxn{kv: f, ctx: ctx}
}

// fencedTxn collects a transaction, to commit it with the fence among its conditions
// (etcd's Txn takes its conditions before its operations).
type fencedTxn struct {
	kv  *fencedKV
	ctx context.Context //nolint:containedctx // clientv3.Txn carries its context from Txn to Commit

	ifs        []clientv3.Cmp
	thens, els []clientv3.Op
}

func (t *fencedTxn) If(cs ...clientv3.Cmp) clientv3.Txn {
	t.ifs = append(t.ifs, cs...)

	return t
}

func (t *fencedTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	t.thens = append(t.thens, ops...)

	return t
}

func (t *fencedTxn) Else(ops ...clientv3.Op) clientv3.Txn {
	t.els = append(t.els, ops...)

	return t
}

// Commit commits the transaction with the fence among its conditions. When it fails,
// the fence is what failed if the election key is not this replica's any more: that is
// an error, not the "condition false" the caller would take for a conflict to retry.
func (t *fencedTxn) Commit() (*clientv3.TxnResponse, error) {
	fence := clientv3.Compare(clientv3.CreateRevision(t.kv.key), "=", t.kv.rev)

	resp, err := t.kv.Client.Txn(t.ctx).If(append(t.ifs, fence)...).Then(t.thens...).Else(t.els...).Commit()
	if err != nil || resp.Succeeded {
		return resp, err
	}

	leader, err := t.kv.Get(t.ctx, t.kv.key)
	if err != nil {
		return nil, fmt.Errorf("error reading the election key after a refused write: %w", err)
	}

	if len(leader.Kvs) == 0 || leader.Kvs[0].CreateRevision != t.kv.rev {
		t.kv.refused()

		return nil, ErrFenced
	}

	return resp, nil
}
