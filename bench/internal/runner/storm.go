package runner

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"
	"time"

	"github.com/anvil-metal/anvil/bench/internal/report"
	"github.com/anvil-metal/anvil/bench/internal/stormbench"
)

// stormOptions are the flags of the storm and assets benchmarks.
type stormOptions struct {
	machines                  *int
	rounds                    *int
	spread, timeout           *time.Duration
	assetsDir                 *string
	assetsConns, assetsRounds *int
	assetsDur                 *time.Duration
}

func stormFlags(fs *flag.FlagSet) stormOptions {
	return stormOptions{
		machines:     fs.Int("storm-machines", 1000, "simulated machines PXE-booting at once in the storm"),
		rounds:       fs.Int("storm-rounds", 3, "storms per stack, alternating (median completion counts)"),
		spread:       fs.Duration("storm-spread", 0, "power-on of the storm's machines spread over this (0: all at once)"),
		timeout:      fs.Duration("storm-timeout", 5*time.Minute, "time one machine of the storm has to boot"),
		assetsDir:    fs.String("storm-assets", "", "directory of real agent assets for the storm and assets benchmarks (empty: fake ones of their size)"),
		assetsConns:  fs.Int("assets-connections", 50, "concurrent downloads of the initramfs in the assets benchmark"),
		assetsRounds: fs.Int("assets-rounds", 3, "wrk runs per server in the assets benchmark (median counts)"),
		assetsDur:    fs.Duration("assets-duration", 10*time.Second, "wrk run length in the assets benchmark"),
	}
}

func runStorm(ctx context.Context, rep *report.Report, o stormOptions, providerBin, self, out string, serverCPU, clientCPU int, logf func(string, ...any)) error {
	res, err := stormbench.Run(ctx, stormbench.Config{
		ProviderBin: providerBin,
		ClientArgv:  []string{self, stormbench.ClientCommand},
		WorkDir:     filepath.Join(out, "storm"),
		AssetsDir:   *o.assetsDir,
		Machines:    *o.machines, Rounds: max(*o.rounds, 1),
		Classic: true,
		Spread:  *o.spread, Timeout: *o.timeout,
		ServerCPU: serverCPU, ClientCPU: clientCPU,
		Log: logf,
	})
	if err != nil {
		return fmt.Errorf("storm benchmark: %w", err)
	}

	a, c := res.Anvil.Median, res.Classic.Median

	rep.Add(report.Row{
		Name: fmt.Sprintf("PXE storm, %d machines at once: all booted to the agent", res.Machines), Unit: "s",
		Anvil: a.Completion.Seconds(), Peer: c.Completion.Seconds(), PeerName: "dnsmasq+nginx",
		Goal: report.RatioAtMost, Target: 1.0,
	})
	rep.Add(report.Row{
		Name: fmt.Sprintf("PXE storm, %d machines: failed boots", res.Machines), Unit: "machines",
		Anvil: float64(a.Failures), Peer: float64(c.Failures), PeerName: "dnsmasq+nginx",
		Goal: report.AnvilAtMost, Target: 0,
	})

	if a.Failures > 0 || c.Failures > 0 {
		rep.Notef("storm: a stack's failed machines end early; the completion times compare only where both booted every machine")
	}

	for _, s := range []stormbench.StackResult{res.Anvil, res.Classic} {
		var rounds []string
		for _, r := range s.Rounds {
			rounds = append(rounds, fmt.Sprintf("%s (%d failed; %d DHCP retransmissions, of which DISCOVERs lacking the site's offer %d, the proxy's %d; %d proxy 4011 answers; UDP buffer drops server %d site %d machines %d)",
				r.Completion.Round(time.Millisecond), r.Failures, r.Retrans, r.NoSite, r.NoProxy, r.ProxyACKs, r.ServerDrops, r.SiteDrops, r.ClientDrops))
		}

		rep.Notef("storm %s: rounds %v; median round p50/p99/max per phase: %s", s.Name, rounds, stormbench.PhaseText(s.Median))

		for _, e := range s.Median.Errors {
			rep.Notef("storm %s failure: %s", s.Name, e)
		}
	}

	rep.Notef("storm: each machine = BIOS PXE DHCP (site dnsmasq + proxy; 4, 8, 16 s retries), TFTP undionly.kpxe (blksize 1468), iPXE DHCP (+ proxy port 4011), start+boot script, kernel %d B + initramfs %d B over HTTP; one client process in its own namespace",
		res.KernelBytes, res.InitrdBytes)

	return nil
}

func runAssets(ctx context.Context, rep *report.Report, o stormOptions, providerBin, out string, serverCPU, clientCPU int, logf func(string, ...any)) error {
	res, err := stormbench.RunAssets(ctx, stormbench.AssetsConfig{
		ProviderBin: providerBin,
		WorkDir:     filepath.Join(out, "assets"),
		AssetsDir:   *o.assetsDir,
		Connections: *o.assetsConns, Duration: *o.assetsDur, Rounds: max(*o.assetsRounds, 1),
		ServerCPU: serverCPU, ClientCPU: clientCPU,
		Log: logf,
	})
	if err != nil {
		return fmt.Errorf("assets benchmark: %w", err)
	}

	rep.Add(report.Row{
		Name: fmt.Sprintf("agent initramfs (%d MB) to %d clients", res.Size>>20, *o.assetsConns), Unit: "MB/s",
		Anvil: res.Anvil / 1e6, Peer: res.Nginx / 1e6, PeerName: "nginx",
		Goal: report.RatioAtLeast, Target: 1.0,
	})
	rep.Add(report.Row{
		Name: "agent initramfs serving CPU per GB", Unit: "CPU s",
		Anvil: res.AnvilCPU, Peer: res.NginxCPU, PeerName: "nginx",
		Goal: report.Info,
	})
	rep.Notef("assets: wrk -t1 -c%d, %s per run, rounds alternating (MB/s): anvil %.0f, nginx %.0f",
		*o.assetsConns, *o.assetsDur, scale(res.AnvilRounds, 1e-6), scale(res.NginxRounds, 1e-6))

	return nil
}

func scale(v []float64, f float64) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = x * f
	}

	return out
}
