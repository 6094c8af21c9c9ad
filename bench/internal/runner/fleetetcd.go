package runner

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/anvil-metal/anvil/bench/internal/fleetbench"
	"github.com/anvil-metal/anvil/bench/internal/report"
)

// fleetEtcdOptions are the fleet-etcd benchmark's own flags; the fleet's apply too.
type fleetEtcdOptions struct {
	etcd   *string
	bmcs   *int
	steady *time.Duration
	runs   *string
}

func fleetEtcdFlags(fs *flag.FlagSet) *fleetEtcdOptions {
	return &fleetEtcdOptions{
		etcd:   fs.String("etcd", "_out/tools/envtest/etcd", "etcd binary of the fleet-etcd benchmark (make envtest-assets builds it)"),
		bmcs:   fs.Int("fleet-etcd-bmcs", -1, "machines given a BMC the provider polls in fleet-etcd (-1: every machine)"),
		steady: fs.Duration("fleet-etcd-steady", time.Minute, "window measured at rest in fleet-etcd, after the scenario and a poll interval"),
		runs:   fs.String("fleet-etcd-runs", "bbolt,etcd", "states fleet-etcd runs the fleet on, in order (the bbolt run is the peer)"),
	}
}

// runFleetEtcd runs the fleet on the embedded store and on a 3-member etcd cluster, the
// same load each, and adds the rows comparing them and what etcd was asked to keep.
func runFleetEtcd(ctx context.Context, rep *report.Report, fo *fleetOptions, eo *fleetEtcdOptions, provider, out string, logf func(string, ...any)) error {
	providerBin, err := filepath.Abs(provider)
	if err != nil {
		return fmt.Errorf("error resolving the provider path: %w", err)
	}

	simBin, err := filepath.Abs(*fo.fleetsim)
	if err != nil {
		return fmt.Errorf("error resolving the fleetsim path: %w", err)
	}

	etcdBin, err := filepath.Abs(*eo.etcd)
	if err != nil {
		return fmt.Errorf("error resolving the etcd path: %w", err)
	}

	for _, b := range []string{providerBin, simBin, etcdBin} {
		if _, err = os.Stat(b); err != nil {
			return fmt.Errorf("no %s (bench/run.sh builds the provider and fleetsim, make envtest-assets etcd): %w", b, err)
		}
	}

	runs := strings.Split(*eo.runs, ",")
	for _, s := range runs {
		if s != fleetbench.StateBolt && s != fleetbench.StateEtcd {
			return fmt.Errorf("-fleet-etcd-runs: %q is neither %s nor %s", s, fleetbench.StateBolt, fleetbench.StateEtcd)
		}
	}

	bmcs := *eo.bmcs
	if bmcs < 0 {
		bmcs = *fo.machines
	}

	results := map[string]*fleetbench.Result{}

	for _, state := range runs {
		logf("fleet-etcd: the fleet on %s", state)

		res, err := fleetbench.Run(ctx, fleetbench.Config{
			ProviderBin: providerBin, FleetsimBin: simBin, WorkDir: filepath.Join(out, "fleet-etcd", state),
			Machines: *fo.machines, Allocate: min(*fo.allocate, *fo.machines), WipeFast: *fo.wipe, Phase: *fo.phase,
			TalosVersion: *fo.talos, SMBIOSDir: *fo.smbios, MemoryLimit: *fo.memLimit, Log: logf,
			State: state, EtcdBin: etcdBin, BMCs: min(bmcs, *fo.machines), Steady: *eo.steady,
		})
		if err != nil {
			rep.Add(report.Row{Name: "fleet on " + state + ": scenario ran to its end (1: it did not)", Anvil: 1, Goal: report.AnvilAtMost, Target: 0})
			rep.Notef("fleet on %s: the scenario stopped: %v", state, err)
		}

		if res != nil {
			results[state] = res
		}

		if ctx.Err() != nil {
			return ctx.Err()
		}
	}

	addFleetEtcd(rep, results[fleetbench.StateEtcd], results[fleetbench.StateBolt])

	return nil
}

// addFleetEtcd adds the rows of the run on etcd, the run on bbolt as its peer (either may
// be missing).
func addFleetEtcd(rep *report.Report, etcd, bolt *fleetbench.Result) {
	main, peer, peerName := etcd, bolt, "anvil on bbolt"
	if main == nil {
		main, peer, peerName = bolt, nil, ""
	}

	if main == nil {
		return
	}

	on := "fleet on " + main.State
	pv := func(f func(r *fleetbench.Result) float64) float64 {
		if peer == nil {
			return 0
		}

		return f(peer)
	}

	row := func(name, unit string, goal report.Goal, target float64, f func(r *fleetbench.Result) float64) {
		rep.Add(report.Row{Name: on + ": " + name, Unit: unit, Anvil: f(main), Peer: pv(f), PeerName: peerName, Goal: goal, Target: target})
	}

	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	mb := func(b int64) float64 { return float64(b) / 1e6 }

	row(fmt.Sprintf("%d agents registered (first Welcome of each)", main.Machines), "s", report.AnvilAtMost, 60,
		func(r *fleetbench.Result) float64 { return r.RegisterTook.Seconds() })
	row("registrations", "/s", report.Info, 0, func(r *fleetbench.Result) float64 {
		if r.RegisterTook <= 0 {
			return 0
		}

		return float64(r.Machines) / r.RegisterTook.Seconds()
	})
	row(fmt.Sprintf("order latency p99, allocate call -> agent has the order (%d)", main.AllocOrder.N), "ms", report.AnvilAtMost, 1000,
		func(r *fleetbench.Result) float64 { return ms(r.AllocOrder.P99) })
	row("order latency p50, allocate call -> agent has the order", "ms", report.Info, 0, func(r *fleetbench.Result) float64 { return ms(r.AllocOrder.P50) })
	row("provider peak RSS", "MB", report.AnvilAtMost, 300, func(r *fleetbench.Result) float64 { return mb(r.PeakRSS) })
	row("provider CPU time, whole run (both lives)", "s", report.Info, 0, func(r *fleetbench.Result) float64 { return r.CPU.Seconds() })
	row("lost (machines, erase reports, owed wipes not re-sent, wipes done twice, never accepted)", "", report.AnvilAtMost, 0,
		func(r *fleetbench.Result) float64 {
			return float64(r.Lost + r.ReportsLost + r.NotResent + r.WipesTwice + r.NotAccepted)
		})

	if e := main.Etcd; e != nil {
		rep.Add(report.Row{Name: on + ": etcd's CPU time, whole run (3 members)", Unit: "s", Anvil: e.CPU.Seconds(), Goal: report.Info})
		addEtcdWrites(rep, on, main)
		rep.Add(report.Row{
			Name: on + ": state at the end (etcd DB size; peer: state.db)", Unit: "MB",
			Anvil: mb(e.DBSize), Peer: pv(func(r *fleetbench.Result) float64 { return mb(r.StateFile) }), PeerName: peerName, Goal: report.Info,
		})
		addQuota(rep, on, main)
	}

	for _, r := range []*fleetbench.Result{main, peer} {
		if r != nil {
			addFleetRunNotes(rep, r)
		}
	}
}

// addEtcdWrites adds a row of etcd's write rate for each phase, and a note of what each
// phase wrote by resource type.
func addEtcdWrites(rep *report.Report, on string, res *fleetbench.Result) {
	for _, p := range res.Phases {
		rep.Add(report.Row{
			Name: fmt.Sprintf("%s: etcd writes, %s (%d, %.0f s)", on, p.Name, p.Machines, p.Took.Seconds()), Unit: "rev/s",
			Anvil: p.PerSecond(float64(p.Revisions)), Goal: report.Info,
		})
	}

	for _, p := range res.Phases {
		w := p.Written()
		rep.Notef("%s, %s: %.1f s; %d revisions (%.1f/s), %d keys put and %d deleted, %.1f MB put (%.0f kB/s; etcd's own count of keys and values %.0f kB/s), WAL %.0f kB/s a member, %d reads (%.0f/s, all members); per machine: %s",
			on, p.Name, p.Took.Seconds(), p.Revisions, p.PerSecond(float64(p.Revisions)), w.Puts, w.Deletes, float64(w.Bytes)/1e6,
			p.PerSecond(float64(w.Bytes))/1e3, p.PerSecond(p.Counters.PutBytes)/1e3, p.PerSecond(p.Counters.WALBytes)/1e3,
			int64(p.Counters.Ranges), p.PerSecond(p.Counters.Ranges), byType(p))
	}

	if e := res.Etcd; e != nil && e.Missed > 0 {
		rep.Notef("%s: the bench's watch lost %d revisions to a compaction: counted in the revisions, in no type", on, e.Missed)
	}
}

// byType lists what a phase wrote per machine by resource type, most first.
func byType(p fleetbench.Phase) string {
	type kv struct {
		kind string
		w    fleetbench.Writes
	}

	var kinds []kv
	for k, w := range p.ByType {
		kinds = append(kinds, kv{k, w})
	}

	if len(kinds) == 0 {
		return "nothing written"
	}

	slices.SortFunc(kinds, func(a, b kv) int { return cmp.Or(b.w.Count()-a.w.Count(), strings.Compare(a.kind, b.kind)) })

	per := func(n int) string {
		if p.Machines == 0 {
			return fmt.Sprintf("%d", n)
		}

		return fmt.Sprintf("%.2f", float64(n)/float64(p.Machines))
	}

	parts := make([]string, 0, len(kinds))

	for _, k := range kinds {
		s := fmt.Sprintf("%s %s (%d B each)", k.kind, per(k.w.Puts), k.w.Bytes/int64(k.w.Count()))
		if k.w.Deletes > 0 {
			s = fmt.Sprintf("%s %s + %s deleted (%d B each)", k.kind, per(k.w.Puts), per(k.w.Deletes), k.w.Bytes/int64(k.w.Count()))
		}

		parts = append(parts, s)
	}

	return strings.Join(parts, ", ")
}

// addQuota adds the steady state's history and how long until the quota under each
// compaction policy.
func addQuota(rep *report.Report, on string, res *fleetbench.Result) {
	s, ok := res.SteadyState()
	if !ok {
		return
	}

	e := res.Etcd
	mb := func(b float64) float64 { return b / 1e6 }

	rep.Add(report.Row{Name: fmt.Sprintf("%s: etcd history written at rest (%d BMCs polled)", on, res.BMCs), Unit: "MB/h", Anvil: mb(s.PerHour()), Goal: report.Info})

	for _, p := range fleetbench.Project(s, e.DBSize, e.Live) {
		switch {
		case p.Compaction.None() && p.Never:
			rep.Notef("%s: %s never reached without compaction: nothing written at rest", on, p.Quota.Name)
		case p.Compaction.None():
			rep.Add(report.Row{Name: fmt.Sprintf("%s: at rest, %s reached without compaction", on, p.Quota.Name), Unit: "h", Anvil: p.Reached.Hours(), Goal: report.Info})
		case p.Quota == fleetbench.Quotas[0]:
			// The level is the same against every quota: one row.
			rep.Add(report.Row{Name: fmt.Sprintf("%s: at rest, etcd DB size levels at, %s", on, p.Compaction.Name), Unit: "MB", Anvil: mb(float64(p.Level)), Goal: report.Info})
		}

		if !p.Compaction.None() && !p.Never {
			rep.Notef("%s: with %s the DB size levels off above %s: reached in %.1f h", on, p.Compaction.Name, p.Quota.Name, p.Reached.Hours())
		}
	}

	rep.Notef("%s, at rest over %s: %.2f revisions/s, %.2f keys written/s (%.2f of them PowerStatus), %.0f B/s of history; carried forward with the PowerStatus ObservedAt refresh at its average (%d BMCs / 10 min = %.2f/s) in place of the window's: %.2f writes/s of %.0f B each, %.1f MB/h",
		on, s.Window.Round(time.Second), s.Revisions, s.MeasuredWrites, s.RefreshSeen, s.MeasuredBytes, res.BMCs, s.Refresh, s.Writes, s.MeanBytes(), mb(s.PerHour()))
	rep.Notef("%s: etcd DB size %.1f MB (in use %.1f MB) at the end, %.1f MB of live data once the history was compacted away; the projection starts from the DB size, a history record being its revision key and key-value (bbolt's page overhead not counted)",
		on, mb(float64(e.DBSize)), mb(float64(e.DBSizeInUse)), mb(float64(e.Live)))
}

// addFleetRunNotes adds the figures of one run the rows do not show.
func addFleetRunNotes(rep *report.Report, res *fleetbench.Result) {
	on := "fleet on " + res.State
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

	rep.Notef("%s: %d simulated machines, %d of them with a BMC (the simulator's power API, read every 30 s), %d allocated, installed, deallocated (reset wipe), the provider SIGKILLed once half their reset wipes were under way and restarted; all accepted and wiped %.1f s after the start; deallocate -> reset wipe order p50 %.0f ms p99 %.0f ms; restart -> %d sessions back in %.1f s; state dir %.1f MB",
		on, res.Machines, res.BMCs, res.Allocated, res.AcceptWipeTook.Seconds(), ms(res.DeallocWipe.P50), ms(res.DeallocWipe.P99),
		res.SessionsAtKill, res.RestartBack.Seconds(), float64(res.StateBytes)/1e6)

	if res.State == fleetbench.StateBolt {
		parts := make([]string, 0, len(res.Phases))
		for _, p := range res.Phases {
			parts = append(parts, fmt.Sprintf("%s %.1f MB after %.0f s", p.Name, float64(p.StateFile)/1e6, p.Took.Seconds()))
		}

		rep.Notef("%s: state.db by phase: %s", on, strings.Join(parts, "; "))
	}

	rep.Notef("%s: lost %d machines, %d erase reports, %d owed reset wipes not re-sent, %d wipes carried out twice; %d never accepted and wiped",
		on, res.Lost, res.ReportsLost, res.NotResent, res.WipesTwice, res.NotAccepted)

	for _, p := range res.Problems {
		rep.Notef("%s problem: %s", on, p)
	}
}
