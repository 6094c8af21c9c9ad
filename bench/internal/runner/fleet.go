package runner

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/anvil-metal/anvil/bench/internal/fleetbench"
	"github.com/anvil-metal/anvil/bench/internal/report"
)

// fleetOptions are the fleet benchmark's flags.
type fleetOptions struct {
	fleetsim           *string
	machines, allocate *int
	wipe, phase        *time.Duration
	talos, smbios      *string
	memLimit           *string
}

func fleetFlags(fs *flag.FlagSet) *fleetOptions {
	return &fleetOptions{
		fleetsim: fs.String("fleetsim", "_out/bin/fleetsim", "fleet simulator binary (go build -o _out/bin/fleetsim ./agent/cmd/fleetsim)"),
		machines: fs.Int("fleet-machines", 10000, "simulated machines of the fleet benchmark"),
		allocate: fs.Int("fleet-allocate", 1000, "of them allocated, installed and deallocated (the reset wipe), the provider killed meanwhile"),
		wipe:     fs.Duration("fleet-wipe", 5*time.Second, "simulated fast wipe of the fleet benchmark"),
		phase:    fs.Duration("fleet-phase", 5*time.Minute, "bound of each phase of the fleet benchmark"),
		talos:    fs.String("fleet-talos-version", "v1.10.0", "Talos version of the fleet benchmark's allocations"),
		smbios:   fs.String("fleet-smbios-dir", "", "SMBIOS dumps of the simulated hardware (default: go-smbios' testdata in the module cache)"),
		memLimit: fs.String("fleet-memory-limit", "", "the provider's --memory-limit in the fleet benchmark (default: its own)"),
	}
}

// runFleet runs the fleet benchmark (no root, loopback only) and adds its rows.
func runFleet(ctx context.Context, rep *report.Report, o *fleetOptions, provider, out string, logf func(string, ...any)) error {
	providerBin, err := filepath.Abs(provider)
	if err != nil {
		return fmt.Errorf("error resolving the provider path: %w", err)
	}

	simBin, err := filepath.Abs(*o.fleetsim)
	if err != nil {
		return fmt.Errorf("error resolving the fleetsim path: %w", err)
	}

	for _, b := range []string{providerBin, simBin} {
		if _, err = os.Stat(b); err != nil {
			return fmt.Errorf("no %s (make bench builds it): %w", b, err)
		}
	}

	res, err := fleetbench.Run(ctx, fleetbench.Config{
		ProviderBin: providerBin, FleetsimBin: simBin, WorkDir: filepath.Join(out, "fleet"),
		Machines: *o.machines, Allocate: min(*o.allocate, *o.machines), WipeFast: *o.wipe, Phase: *o.phase,
		TalosVersion: *o.talos, SMBIOSDir: *o.smbios, MemoryLimit: *o.memLimit, Log: logf,
	})
	if res != nil {
		addFleet(rep, res)
	}

	// A scenario cut short is a failed row and its reason, beside what it measured.
	if err != nil {
		rep.Add(report.Row{Name: "fleet: scenario ran to its end (1: it did not)", Anvil: 1, Goal: report.AnvilAtMost, Target: 0})
		rep.Notef("fleet: the scenario stopped: %v", err)
	}

	return nil
}

func addFleet(rep *report.Report, res *fleetbench.Result) {
	n := res.Machines
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

	rep.Add(report.Row{
		Name: fmt.Sprintf("fleet: %d agents registered (first Welcome of each)", n), Unit: "s",
		Anvil: res.RegisterTook.Seconds(), Goal: report.AnvilAtMost, Target: 60,
	})

	if res.RegisterTook > 0 {
		rep.Add(report.Row{Name: "fleet: registrations", Unit: "/s", Anvil: float64(n) / res.RegisterTook.Seconds(), Goal: report.Info})
	}

	rep.Add(report.Row{
		Name: fmt.Sprintf("fleet: order latency p99, allocate call -> agent has the order (%d)", res.AllocOrder.N), Unit: "ms",
		Anvil: ms(res.AllocOrder.P99), Goal: report.AnvilAtMost, Target: 1000,
	})
	rep.Add(report.Row{Name: "fleet: order latency p50, allocate call -> agent has the order", Unit: "ms", Anvil: ms(res.AllocOrder.P50), Goal: report.Info})
	rep.Add(report.Row{
		Name: fmt.Sprintf("fleet: provider peak RSS, %d full inventories", n), Unit: "MB",
		Anvil: float64(res.PeakRSS) / 1e6, Goal: report.AnvilAtMost, Target: 300,
	})
	rep.Add(report.Row{Name: "fleet: provider CPU time, whole scenario (both lives)", Unit: "s", Anvil: res.CPU.Seconds(), Goal: report.Info})
	rep.Add(report.Row{Name: "fleet: state dir size at the end", Unit: "MB", Anvil: float64(res.StateBytes) / 1e6, Goal: report.Info})
	rep.Add(report.Row{
		Name: fmt.Sprintf("fleet: SIGKILL restart -> all %d sessions back", res.SessionsAtKill), Unit: "s",
		Anvil: res.RestartBack.Seconds(), Goal: report.Info,
	})
	rep.Add(report.Row{
		Name: "fleet: lost (machines, erase reports, owed wipes not re-sent, wipes done twice, never accepted)", Unit: "",
		Anvil: float64(res.Lost + res.ReportsLost + res.NotResent + res.WipesTwice + res.NotAccepted), Goal: report.AnvilAtMost, Target: 0,
	})

	rep.Notef("fleet: %d simulated machines (agent/cmd/fleetsim: a real agent session each, own gRPC connection and TLS, token from a real boot-script fetch) against one provider on loopback; auto-accept all, then %d allocated, installed, deallocated (reset wipe), the provider SIGKILLed once half their reset wipes were under way, restarted on the same state",
		n, res.Allocated)
	rep.Notef("fleet: all accepted and wiped %.1f s after the start; deallocate -> reset wipe order (power cycle through the power API and a PXE boot between) p50 %.0f ms p99 %.0f ms (%d)",
		res.AcceptWipeTook.Seconds(), ms(res.DeallocWipe.P50), ms(res.DeallocWipe.P99), res.DeallocWipe.N)
	if p := res.AtPeak; p.RSS > 0 {
		perSession := 0.0
		if res.Machines > 0 {
			perSession = float64(p.Goroutines) / float64(res.Machines)
		}

		rep.Notef("fleet: at the provider's largest resident memory seen (%.0f MB): Go heap in use %.0f MB (next collection at %.0f MB), goroutine stacks %.0f MB for %d goroutines (%.1f per machine)",
			float64(p.RSS)/1e6, float64(p.HeapInuse)/1e6, float64(p.NextGC)/1e6, float64(p.StackInuse)/1e6, p.Goroutines, perSession)
	}

	rep.Notef("fleet: lost %d machines, %d erase reports, %d owed reset wipes not re-sent, %d wipes carried out twice; %d never accepted and wiped",
		res.Lost, res.ReportsLost, res.NotResent, res.WipesTwice, res.NotAccepted)

	for _, p := range res.Problems {
		rep.Notef("fleet problem: %s", p)
	}
}
