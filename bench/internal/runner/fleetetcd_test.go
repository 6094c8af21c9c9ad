package runner

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/bench/internal/fleetbench"
	"github.com/anvil-metal/anvil/bench/internal/report"
)

func TestAddFleetEtcd(t *testing.T) {
	t.Parallel()

	phases := func(byType map[string]fleetbench.Writes) []fleetbench.Phase {
		return []fleetbench.Phase{
			{Name: "registration, acceptance, wipe", Machines: 10, Took: 10 * time.Second, Revisions: 50, ByType: byType, StateFile: 1 << 20},
			{Name: fleetbench.PhaseSteady, Machines: 10, Took: time.Minute, StateFile: 1 << 20},
		}
	}

	etcd := &fleetbench.Result{
		Machines: 10, State: fleetbench.StateEtcd, BMCs: 10, RegisterTook: 2 * time.Second,
		AllocOrder: fleetbench.Latency{N: 2, P50: 100 * time.Millisecond, P99: 400 * time.Millisecond},
		Phases: phases(map[string]fleetbench.Writes{
			"Machines":      {Puts: 20, Bytes: 9000},
			"(locks)":       {Puts: 10, Deletes: 10, Bytes: 1600},
			"PowerStatuses": {Puts: 10, Bytes: 4000},
		}),
		Etcd: &fleetbench.EtcdResult{Members: 3, DBSize: 3 << 20, DBSizeInUse: 2 << 20, Live: 1 << 20},
	}
	bolt := &fleetbench.Result{
		Machines: 10, State: fleetbench.StateBolt, BMCs: 10, RegisterTook: time.Second,
		AllocOrder: fleetbench.Latency{N: 2, P50: 50 * time.Millisecond, P99: 100 * time.Millisecond},
		Phases:     phases(nil), StateFile: 1 << 20,
	}

	var rep report.Report

	addFleetEtcd(&rep, etcd, bolt)

	rows := map[string]report.Row{}
	for _, r := range rep.Rows {
		rows[r.Name] = r
	}

	regs := rows["fleet on etcd: registrations"]
	require.InDelta(t, 0.5, regs.Ratio(), 1e-9, "etcd's registrations/s over bbolt's")

	p99 := rows["fleet on etcd: order latency p99, allocate call -> agent has the order (2)"]
	require.InDelta(t, 4, p99.Ratio(), 1e-9)
	require.Equal(t, "anvil on bbolt", p99.PeerName)

	require.InDelta(t, 5, rows["fleet on etcd: etcd writes, registration, acceptance, wipe (10, 10 s)"].Anvil, 1e-9)
	require.Contains(t, rows, "fleet on etcd: at rest, 2 GiB quota (etcd's default) reached without compaction")

	notes := strings.Join(rep.Notes, "\n")
	require.Contains(t, notes, "(locks) 1.00 + 1.00 deleted (80 B each), Machines 2.00 (450 B each), PowerStatuses 1.00 (400 B each)")
	require.Contains(t, notes, "fleet on bbolt: state.db by phase")

	// Without the etcd run the bbolt one stands alone.
	var alone report.Report

	addFleetEtcd(&alone, nil, bolt)
	require.NotEmpty(t, alone.Rows)
	require.Zero(t, alone.Rows[0].Peer)
}
