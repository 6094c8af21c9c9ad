package fleetbench

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestKindOf(t *testing.T) {
	t.Parallel()

	for key, want := range map[string]string{
		"/anvil/bench/state/metal/MachineStatuses.anvil.dev/ab12":  "MachineStatuses",
		"/anvil/bench/state/metal/Odd%2FType/ab12":                 "Odd/Type",
		"/anvil/bench/leader/694d9a":                               "(leader)",
		"/anvil/bench/locks/transitions/694d9b":                    "(locks)",
		"/anvil/bench/provider-key":                                "(provider-key)",
		"/anvil/other/state/metal/Machines.anvil.dev/ab12":         "(elsewhere)",
		"/anvil/bench/state/metal/MachineStatuses.anvil.dev":       "(state)",
		"/anvil/bench/files/ca.crt":                                "(files)",
		"/anvil/bench/state/metal/MachineIntents.anvil.dev/0/more": "MachineIntents",
	} {
		require.Equal(t, want, kindOf(key, etcdPrefix), key)
	}
}

func etcdEvent(typ mvccpb.Event_EventType, key string, rev int64, value string) *clientv3.Event {
	return &clientv3.Event{Type: typ, Kv: &mvccpb.KeyValue{Key: []byte(key), ModRevision: rev, Value: []byte(value)}}
}

func TestTally(t *testing.T) {
	t.Parallel()

	ta := newTally()
	header := func(rev int64) etcdserverpb.ResponseHeader { return etcdserverpb.ResponseHeader{Revision: rev} }

	// The watch's creation: every write up to its revision is before it.
	created := clientv3.WatchResponse{Header: header(4), Created: true}
	require.Equal(t, int64(4), ta.add(&created, etcdPrefix))

	status := etcdPrefix + "/state/metal/MachineStatuses.anvil.dev/a"
	lock := etcdPrefix + "/locks/transitions/1"

	batch := clientv3.WatchResponse{Header: header(9), Events: []*clientv3.Event{
		etcdEvent(mvccpb.PUT, status, 5, "0123456789"),
		etcdEvent(mvccpb.PUT, lock, 6, ""),
		etcdEvent(mvccpb.DELETE, lock, 7, ""),
		etcdEvent(mvccpb.PUT, status, 8, "0123456789"),
	}}
	// Events up to 8 were sent, not those up to the header's 9.
	require.Equal(t, int64(8), ta.add(&batch, etcdPrefix))

	progress := clientv3.WatchResponse{Header: header(12)}
	require.Equal(t, int64(12), ta.add(&progress, etcdPrefix))

	all := ta.between(4, 12)
	require.Equal(t, 2, all["MachineStatuses"].Puts)
	require.Equal(t, Writes{Puts: 1, Deletes: 1, Bytes: all["(locks)"].Bytes}, all["(locks)"])

	kv := mvccpb.KeyValue{Key: []byte(status), ModRevision: 5, Value: []byte("0123456789")}
	require.Equal(t, int64(2*(revisionKeyBytes+kv.Size())), all["MachineStatuses"].Bytes, "each write: its revision key and key-value")

	first := ta.between(4, 6)
	require.Equal(t, 1, first["MachineStatuses"].Puts)
	require.Equal(t, 1, first["(locks)"].Puts)
	require.Zero(t, first["(locks)"].Deletes)

	require.Empty(t, ta.between(8, 12))
}

func TestParseMetrics(t *testing.T) {
	t.Parallel()

	page := `# HELP etcd_mvcc_put_total Total number of puts seen by this member.
# TYPE etcd_mvcc_put_total counter
etcd_mvcc_put_total 1234
etcd_debugging_mvcc_total_put_size_in_bytes 5.6789e+06
etcd_disk_wal_write_bytes_total{quirk="labelled"} 99
etcd_disk_wal_write_bytes_total 4321
`

	var c etcdCounters

	require.NoError(t, parseMetrics(strings.NewReader(page), map[string]*float64{
		"etcd_mvcc_put_total":                         &c.Puts,
		"etcd_debugging_mvcc_total_put_size_in_bytes": &c.PutBytes,
		"etcd_disk_wal_write_bytes_total":             &c.WALBytes,
	}))
	require.Equal(t, etcdCounters{Puts: 1234, PutBytes: 5678900, WALBytes: 4321}, c)
	require.Equal(t, etcdCounters{Puts: 1000, PutBytes: 5678000, WALBytes: 4000}, c.sub(etcdCounters{Puts: 234, PutBytes: 900, WALBytes: 321}))
}

func TestSteadyState(t *testing.T) {
	t.Parallel()

	res := &Result{BMCs: 6000, Etcd: &EtcdResult{}, Phases: []Phase{
		{Name: "BMCs given", Took: time.Minute, ByType: map[string]Writes{powerKind: {Puts: 100, Bytes: 40000}}},
		{Name: PhaseSteady, Took: 100 * time.Second, Revisions: 250, ByType: map[string]Writes{
			powerKind:         {Puts: 100, Bytes: 40000},
			"MachineStatuses": {Puts: 150, Bytes: 150000},
		}},
	}}

	s, ok := res.SteadyState()
	require.True(t, ok)
	require.InDelta(t, 2.5, s.Revisions, 1e-9)
	require.InDelta(t, 2.5, s.MeasuredWrites, 1e-9)
	require.InDelta(t, 1.0, s.RefreshSeen, 1e-9)
	require.InDelta(t, 10.0, s.Refresh, 1e-9, "6,000 BMCs, one write each every 10 minutes")
	// The window's 1 PowerStatus write/s replaced by the refresh's 10/s of 400 B each.
	require.InDelta(t, 11.5, s.Writes, 1e-9)
	require.InDelta(t, 1500+4000, s.Bytes, 1e-9)
	require.InDelta(t, 5500*3600, s.PerHour(), 1e-6)

	_, ok = (&Result{Phases: res.Phases}).SteadyState()
	require.False(t, ok, "not on etcd")
}

func TestProject(t *testing.T) {
	t.Parallel()

	const mib = 1 << 20

	// 1 MiB of history an hour from 1 GiB now: 1 GiB to go to the default quota.
	s := Steady{Writes: 1, Bytes: mib / 3600.0}
	ps := Project(s, 1<<30, 100*mib)
	require.Len(t, ps, len(Compactions)*len(Quotas))

	none2, none8 := ps[0], ps[1]
	require.True(t, none2.Compaction.None())
	require.InDelta(t, 1024, none2.Reached.Hours(), 1e-6)
	require.InDelta(t, 7*1024, none8.Reached.Hours(), 1e-6)

	for _, p := range ps[2:] {
		require.True(t, p.Never, "%s levels off below %s", p.Compaction.Name, p.Quota.Name)
		require.Equal(t, int64(1<<30), p.Level, "never below the size now: freed pages are not given back")
	}

	// A history larger than the quota within the time a compaction keeps it: reached.
	heavy := Steady{Writes: 1000, Bytes: 1 << 20} // 3.5 GiB an hour
	ps = Project(heavy, 0, 0)
	periodic2 := ps[4]
	require.Equal(t, "periodic compaction of 1h", periodic2.Compaction.Name)
	require.False(t, periodic2.Never)
	require.InDelta(t, 2048, periodic2.Reached.Seconds(), 1e-6)

	revision2 := ps[2]
	require.True(t, revision2.Never)
	require.Equal(t, int64(1<<20+300<<20), revision2.Level, "1,000 revisions (1 MiB at 1,049 B each) and 5 minutes held")

	quiet := Project(Steady{}, 1<<30, 0)
	require.True(t, quiet[0].Never, "nothing written: never")

	full := Project(s, 3<<30, 0)
	require.False(t, full[0].Never)
	require.Zero(t, full[0].Reached, "past the quota already")
}
