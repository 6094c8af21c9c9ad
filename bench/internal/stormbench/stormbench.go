// Package stormbench is the PXE storm: M simulated machines power on at once and each
// does what BIOS PXE firmware and iPXE do — DHCP against the site's server and a
// ProxyDHCP, TFTP of the iPXE binary, DHCP again as iPXE, the boot script over HTTP,
// the agent's kernel and initramfs — against Anvil and, in the same run, the classic
// stack (dnsmasq ProxyDHCP + TFTP, nginx). It also holds the asset-serving benchmark.
package stormbench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/anvil-metal/anvil/bench/internal/dhcpbench"
	"github.com/anvil-metal/anvil/internal/netns"
	"github.com/anvil-metal/anvil/internal/proc"
)

// Config configures the storm.
type Config struct {
	// ProviderBin is the provider binary.
	ProviderBin string
	// ClientArgv runs ClientMain: the bench binary and ClientCommand, or a test binary.
	ClientArgv []string
	// WorkDir holds logs, the fake assets, the TFTP root and the stacks' files.
	WorkDir string
	// AssetsDir, when set, holds real agent assets (vmlinuz-amd64, initramfs-amd64.*,
	// cmdline-amd64); else fake ones of the real size are written under WorkDir.
	AssetsDir string
	// Machines is M; Rounds how many storms per stack (alternating; the median counts).
	Machines, Rounds int
	// Classic runs the classic stack too.
	Classic bool
	// Spread spreads power-on over this; 0 is all at once.
	Spread time.Duration
	// Timeout bounds one machine's boot; the storm's own bound is twice it.
	Timeout time.Duration
	// ServerCPU, ClientCPU pin the servers and the machines (-1: not pinned).
	ServerCPU, ClientCPU int
	// Subnet is the second octet of the segment's 10.x.0.0/16.
	Subnet byte
	Log    func(format string, args ...any)
}

// PhaseStats summarises one phase over the machines that completed it.
type PhaseStats struct {
	P50, P99, Max time.Duration
}

// Storm is one storm against one stack.
type Storm struct {
	// Completion is from power-on to the last machine's initramfs in.
	Completion time.Duration
	Failures   int
	// Errors are the first distinct failures.
	Errors  []string
	Phases  [phases]PhaseStats
	Retrans int
	// NoSite, NoProxy are the DISCOVERs sent again for want of the site server's offer,
	// and of the proxy's.
	NoSite, NoProxy int
	// ProxyACKs counts iPXE's boot server requests (4011) the proxy answered.
	ProxyACKs            int
	TFTPBytes, HTTPBytes int64
	// ServerDrops, SiteDrops, ClientDrops are the UDP datagrams each namespace dropped
	// for a full socket buffer during the storm: who could not keep up with the burst.
	ServerDrops, SiteDrops, ClientDrops int64
}

// StackResult is one stack's storms.
type StackResult struct {
	Name   string
	Rounds []Storm
	// Median is the round of median completion time.
	Median Storm
}

// Result is the storm's outcome.
type Result struct {
	Machines int
	Anvil    StackResult
	// Classic is empty when Config.Classic is off.
	Classic     StackResult
	KernelBytes int64
	InitrdBytes int64
}

// Run runs the storm. Namespaces and processes are removed before it returns, also on
// failure or when ctx ends.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	// The site reserves an address per machine in a /17.
	if cfg.Machines <= 0 || cfg.Machines > 32000 || cfg.Rounds <= 0 || len(cfg.ClientArgv) == 0 {
		return nil, errors.New("storm: want 1-32000 machines, rounds and a client command")
	}

	if cfg.Log == nil {
		cfg.Log = func(string, ...any) {}
	}

	if cfg.Subnet == 0 {
		cfg.Subnet = 89
	}

	if err := prepare(&cfg); err != nil {
		return nil, err
	}

	res := &Result{Machines: cfg.Machines, Anvil: StackResult{Name: "anvil"}, Classic: StackResult{Name: "classic"}}

	var err error
	if res.KernelBytes, res.InitrdBytes, err = cfg.assetSizes(); err != nil {
		return nil, err
	}

	g, err := newSegment(fmt.Sprintf("anvst%d", os.Getpid()%100000), cfg.Subnet)
	if err != nil {
		return nil, err
	}

	// Every process is stopped before this runs: namespaces without processes go.
	defer func() {
		if derr := g.delete(); derr != nil {
			fmt.Fprintln(os.Stderr, "storm: cleanup:", derr)
		}
	}()

	site, err := startSiteDHCP(&cfg, g)
	if err != nil {
		return nil, err
	}
	defer site.stop()

	type runner struct {
		res   *StackResult
		start func() (*stack, error)
	}

	stacks := []runner{{&res.Anvil, func() (*stack, error) { return startAnvil(ctx, &cfg, g) }}}
	if cfg.Classic {
		stacks = append(stacks, runner{&res.Classic, func() (*stack, error) { return startClassic(ctx, &cfg, g) }})
	}

	// Rounds alternate the stacks so that drifts of a noisy host hit both.
	for round := range cfg.Rounds {
		for _, st := range stacks {
			s, err := st.start()
			if err != nil {
				return nil, fmt.Errorf("error starting %s: %w", st.res.Name, err)
			}

			storm, err := runStorm(ctx, &cfg, g)

			exitErr := s.exited()

			s.stop()

			if err == nil {
				err = exitErr
			}

			if err != nil {
				return nil, fmt.Errorf("%s storm: %w", st.res.Name, err)
			}

			cfg.Log("storm round %d %-7s %d machines: all done in %s, %d failed, %d DHCP retransmissions (DISCOVERs lacking the site's offer %d, the proxy's %d; UDP buffer drops: server %d, site %d, machines %d); per phase p99 %s",
				round+1, st.res.Name, cfg.Machines, storm.Completion.Round(time.Millisecond), storm.Failures, storm.Retrans, storm.NoSite, storm.NoProxy,
				storm.ServerDrops, storm.SiteDrops, storm.ClientDrops, phaseText(storm, func(p PhaseStats) time.Duration { return p.P99 }))

			for _, e := range storm.Errors {
				cfg.Log("storm round %d %-7s failure: %s", round+1, st.res.Name, e)
			}

			st.res.Rounds = append(st.res.Rounds, storm)
		}
	}

	for _, st := range stacks {
		st.res.Median = medianStorm(st.res.Rounds)
	}

	return res, nil
}

// runStorm runs the client in the client namespace and summarises its machines.
func runStorm(ctx context.Context, cfg *Config, g *segment) (Storm, error) {
	sctx, cancel := context.WithTimeout(ctx, 2*cfg.Timeout+time.Minute)
	defer cancel()

	argv := append(slices.Clone(cfg.ClientArgv),
		"-machines", strconv.Itoa(cfg.Machines), "-iface", g.bridge,
		"-timeout", cfg.Timeout.String(), "-spread", cfg.Spread.String())

	namespaces := []string{g.server, g.site, g.client}

	before, err := rcvbufErrors(namespaces)
	if err != nil {
		return Storm{}, err
	}

	out, err := proc.Run(sctx, netns.Argv(g.client, proc.Pinned(cfg.ClientCPU, argv...)...)...)
	if err != nil {
		return Storm{}, fmt.Errorf("storm client: %w", err)
	}

	after, err := rcvbufErrors(namespaces)
	if err != nil {
		return Storm{}, err
	}

	var cr ClientResult

	line := out[strings.LastIndexByte(strings.TrimSpace(out), '\n')+1:]
	if err := json.Unmarshal([]byte(line), &cr); err != nil {
		return Storm{}, fmt.Errorf("error parsing the storm client's output: %w (%.300s)", err, out)
	}

	if len(cr.Machines) != cfg.Machines {
		return Storm{}, fmt.Errorf("the storm client reported %d machines of %d", len(cr.Machines), cfg.Machines)
	}

	storm := summarise(cr.Machines)
	storm.ServerDrops, storm.SiteDrops, storm.ClientDrops = after[0]-before[0], after[1]-before[1], after[2]-before[2]

	return storm, nil
}

func rcvbufErrors(namespaces []string) ([]int64, error) {
	v := make([]int64, len(namespaces))

	for i, ns := range namespaces {
		var err error
		if v[i], err = dhcpbench.UDPRcvbufErrors(ns); err != nil {
			return nil, err
		}
	}

	return v, nil
}

// summarise computes a storm's figures from its machines.
func summarise(ms []MachineResult) Storm {
	var (
		s      Storm
		phaseT [phases][]time.Duration
		seen   = map[string]bool{}
	)

	for _, m := range ms {
		s.Completion = max(s.Completion, m.End)
		s.Retrans += m.Retrans
		s.NoSite += m.NoSite
		s.NoProxy += m.NoProxy
		s.ProxyACKs += m.ProxyACKs
		s.TFTPBytes += m.TFTPBytes
		s.HTTPBytes += m.HTTPBytes

		if m.Err != "" {
			s.Failures++

			if !seen[m.Err] && len(s.Errors) < 5 {
				seen[m.Err] = true
				s.Errors = append(s.Errors, fmt.Sprintf("machine %d: %s", m.Index, m.Err))
			}

			continue
		}

		for p := range phases {
			phaseT[p] = append(phaseT[p], m.Phase[p])
		}
	}

	for p := range phases {
		s.Phases[p] = stats(phaseT[p])
	}

	return s
}

func stats(v []time.Duration) PhaseStats {
	if len(v) == 0 {
		return PhaseStats{}
	}

	slices.Sort(v)

	at := func(q float64) time.Duration { return v[min(len(v)-1, int(q*float64(len(v))))] }

	return PhaseStats{P50: at(0.5), P99: at(0.99), Max: v[len(v)-1]}
}

func medianStorm(rounds []Storm) Storm {
	if len(rounds) == 0 {
		return Storm{}
	}

	s := slices.Clone(rounds)
	slices.SortFunc(s, func(a, b Storm) int { return int(a.Completion - b.Completion) })

	return s[len(s)/2]
}

// phaseText prints one figure of every phase.
func phaseText(s Storm, f func(PhaseStats) time.Duration) string {
	parts := make([]string, phases)
	for p := range phases {
		parts[p] = PhaseNames[p] + " " + f(s.Phases[p]).Round(time.Millisecond).String()
	}

	return strings.Join(parts, ", ")
}

// PhaseText prints the p50/p99/max of every phase of a storm, for reports.
func PhaseText(s Storm) string {
	parts := make([]string, phases)
	for p := range phases {
		ps := s.Phases[p]
		parts[p] = fmt.Sprintf("%s %s/%s/%s", PhaseNames[p],
			ps.P50.Round(time.Millisecond), ps.P99.Round(time.Millisecond), ps.Max.Round(time.Millisecond))
	}

	return strings.Join(parts, "; ")
}
