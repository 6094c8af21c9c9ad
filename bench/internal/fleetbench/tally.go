package fleetbench

import (
	"cmp"
	"context"
	"errors"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// revisionKeyBytes is the size of the key a revision is stored under in etcd's backend
// (8 bytes main revision, '_', 8 bytes sub revision; a tombstone's has a 't' more).
const revisionKeyBytes = 17

// Writes are the keys written of one kind, and the bytes they added to etcd's history:
// each write is a record of its revision key and the key-value (key, value, revisions).
type Writes struct {
	Puts, Deletes int
	Bytes         int64
}

func (w *Writes) add(o Writes) {
	w.Puts += o.Puts
	w.Deletes += o.Deletes
	w.Bytes += o.Bytes
}

// Count is the puts and the deletes.
func (w Writes) Count() int { return w.Puts + w.Deletes }

// write is one key written, as the tally keeps it.
type write struct {
	rev   int64
	bytes int32
	kind  uint16
	del   bool
}

// tally is every key written under the site's prefix, from a watch of it: what the
// revisions of a phase were spent on.
type tally struct {
	mu     sync.Mutex
	kinds  []string
	index  map[string]uint16
	writes []write
	// seen is the revision up to which every write was tallied (or missed); missed are
	// the revisions a compaction removed before the watch had them.
	seen, missed int64
}

func newTally() *tally { return &tally{index: map[string]uint16{}} }

// kindOf is what a key under the site's prefix holds: a resource type for the state
// (<prefix>/state/<namespace>/<type>/<hashed id>), else its first element in brackets
// (the election, the shared files, the key check).
func kindOf(key, prefix string) string {
	rest, ok := strings.CutPrefix(key, prefix)
	if !ok {
		return "(elsewhere)"
	}

	parts := strings.Split(strings.TrimPrefix(rest, "/"), "/")
	if parts[0] == "state" && len(parts) >= 4 {
		typ, err := url.PathUnescape(parts[2])
		if err != nil {
			typ = parts[2]
		}

		return strings.TrimSuffix(typ, ".anvil.dev")
	}

	return "(" + parts[0] + ")"
}

// watch tallies every write under prefix from the revision after the first response
// until ctx is done. A watch a compaction overtook starts again after it, counting the
// revisions it missed.
func (t *tally) watch(ctx context.Context, cli *clientv3.Client, prefix string) {
	root := strings.TrimSuffix(prefix, "/")
	next := int64(0)

	for ctx.Err() == nil {
		opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithProgressNotify()}
		if next > 0 {
			opts = append(opts, clientv3.WithRev(next))
		}

		for resp := range cli.Watch(clientv3.WithRequireLeader(ctx), prefix, opts...) {
			if resp.CompactRevision > 0 {
				t.mu.Lock()
				t.missed += resp.CompactRevision - max(next, 1)
				t.seen = max(t.seen, resp.CompactRevision-1)
				t.mu.Unlock()

				next = resp.CompactRevision

				break
			}

			if resp.Err() != nil {
				break
			}

			next = t.add(&resp, root) + 1
		}

		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// add tallies a watch response's events; it returns the revision tallied up to.
func (t *tally) add(resp *clientv3.WatchResponse, root string) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()

	if resp.IsProgressNotify() || t.seen == 0 && len(resp.Events) == 0 {
		// Every event up to the header's revision was sent.
		t.seen = max(t.seen, resp.Header.Revision)
	}

	for _, ev := range resp.Events {
		kind := kindOf(string(ev.Kv.Key), root)

		i, ok := t.index[kind]
		if !ok {
			i = uint16(len(t.kinds)) //nolint:gosec // a few dozen kinds
			t.index[kind] = i
			t.kinds = append(t.kinds, kind)
		}

		w := write{rev: ev.Kv.ModRevision, bytes: int32(revisionKeyBytes + ev.Kv.Size()), kind: i} //nolint:gosec // a key-value is far below 2 GiB
		if ev.Type == mvccpb.DELETE {
			w.del, w.bytes = true, w.bytes+1
		}

		t.writes = append(t.writes, w)
		t.seen = max(t.seen, w.rev)
	}

	return t.seen
}

var errWatchBehind = errors.New("the bench's watch of etcd did not catch up")

// caughtUp waits (bounded by 30 s) until the watch has tallied every write up to rev,
// asking etcd for progress reports meanwhile.
func (t *tally) caughtUp(ctx context.Context, cli *clientv3.Client, rev int64) error {
	deadline := time.Now().Add(30 * time.Second)

	for {
		t.mu.Lock()
		seen := t.seen
		t.mu.Unlock()

		if seen >= rev {
			return nil
		}

		if time.Now().After(deadline) || ctx.Err() != nil {
			return errWatchBehind
		}

		_ = cli.RequestProgress(clientv3.WithRequireLeader(ctx)) // the next try asks again

		time.Sleep(200 * time.Millisecond)
	}
}

// between sums the writes of each kind with revisions in (from, to].
func (t *tally) between(from, to int64) map[string]Writes {
	t.mu.Lock()
	defer t.mu.Unlock()

	out := map[string]Writes{}

	// Revisions only grow along the slice: the watch delivers them in order.
	lo, _ := slices.BinarySearchFunc(t.writes, from+1, func(w write, rev int64) int { return cmp.Compare(w.rev, rev) })

	for _, w := range t.writes[lo:] {
		if w.rev > to {
			break
		}

		sum := out[t.kinds[w.kind]]
		if w.del {
			sum.Deletes++
		} else {
			sum.Puts++
		}

		sum.Bytes += int64(w.bytes)
		out[t.kinds[w.kind]] = sum
	}

	return out
}

// missedRevisions are the revisions a compaction took from the watch.
func (t *tally) missedRevisions() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()

	return t.missed
}
