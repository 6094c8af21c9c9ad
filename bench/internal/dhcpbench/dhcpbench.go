// Package dhcpbench measures ProxyDHCP answers per second at <= 1% drops: perfdhcp, acting
// as a relay in a client namespace, sends PXE DISCOVERs to Anvil's ProxyDHCP and to
// dnsmasq in proxy mode, one after the other, in a server namespace.
package dhcpbench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/anvil-metal/anvil/bench/internal/profile"
	"github.com/anvil-metal/anvil/internal/netns"
	"github.com/anvil-metal/anvil/internal/proc"
)

// PXE options perfdhcp adds to every DISCOVER: vendor class (60) of a BIOS PXE ROM,
// client architecture (93) x86 BIOS, client machine identifier (97) type 0 + a GUID.
var pxeOptions = []string{
	"60," + fmt.Sprintf("%x", "PXEClient:Arch:00000:UNDI:002001"),
	"93,0000",
	"97,00" + "0123456789abcdef0123456789abcdef",
}

// Config configures the benchmark.
type Config struct {
	// ProviderBin is the provider binary.
	ProviderBin string
	// WorkDir holds logs and the provider's throwaway state.
	WorkDir string
	// Trial is how long perfdhcp sends at one rate.
	Trial time.Duration
	// Rounds is how many times each server's maximum rate is searched; the median counts.
	Rounds int
	// StartRate is the first rate tried; rates double until a trial fails, then a
	// bisection narrows the gap Bisections times.
	StartRate, MaxRate, Bisections int
	// MaxDropPct is the highest drop percentage of a passing trial.
	MaxDropPct float64
	// ServerCPU, ClientCPU pin the servers and perfdhcp (-1: not pinned).
	ServerCPU, ClientCPU int
	// CostRate is the rate of the trial that measures the servers' CPU time per answer
	// (below perfdhcp's own ceiling, so that the client does not limit it).
	CostRate int
	// Profile builds a provider serving pprof (Repo is the module root) and keeps a CPU
	// profile of its first cost trial.
	Profile bool
	Repo    string
	// Log receives progress lines.
	Log func(format string, args ...any)
}

// Trial is one perfdhcp run.
type Trial struct {
	Rate              int
	Sent, Received    int64
	Drops             int64
	DropPct           float64
	AnsweredPerSecond float64
	Pass              bool
	// ServerBufDrops, ClientBufDrops are the datagrams each namespace dropped for a full
	// socket receive buffer during the trial: they say which side could not keep up.
	ServerBufDrops, ClientBufDrops int64

	// cost and costReceived come from the round's CPU cost trial (on the best trial
	// only, to carry them out of searchServer).
	cost         time.Duration
	costReceived int64
}

// ServerResult is the outcome for one server.
type ServerResult struct {
	Name string
	// Rounds holds the best passing trial of each round.
	Rounds []Trial
	// Best is the median round.
	Best Trial
	// TotalReceived counts the answers perfdhcp got from this server over all trials.
	TotalReceived int64
	// CPUPerAnswer is the server's CPU time per answer at CostRate, the median over
	// rounds; CostRounds all of them.
	CPUPerAnswer time.Duration
	CostRounds   []time.Duration
}

// Result is the outcome of the benchmark.
type Result struct {
	Anvil, Dnsmasq ServerResult
	// Profile is the CPU profile's path and its summary, when profiling.
	Profile, ProfileTop string
}

// server is a ProxyDHCP under test.
type server struct {
	name  string
	start func(ctx context.Context, pair *nsPair) (*proc.Child, error)
}

// Run runs the benchmark. Namespaces and processes are removed before it returns.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := os.MkdirAll(cfg.WorkDir, 0o755); err != nil {
		return nil, fmt.Errorf("error creating %s: %w", cfg.WorkDir, err)
	}

	prefix := fmt.Sprintf("anvb%d", os.Getpid()%100000)

	pair, err := newPair(prefix, "10.88.0")
	if err != nil {
		return nil, err
	}

	// Every server is stopped before this runs: namespaces without processes go.
	defer func() {
		if derr := pair.delete(); derr != nil {
			fmt.Fprintln(os.Stderr, "bench: cleanup:", derr)
		}
	}()

	var prof *profiler

	if cfg.Profile {
		if prof, err = newProfiler(ctx, cfg, pair); err != nil {
			return nil, err
		}

		cfg.ProviderBin = prof.bin
	}

	servers := []server{
		{name: "anvil", start: func(ctx context.Context, pair *nsPair) (*proc.Child, error) { return startAnvil(ctx, cfg, pair, prof) }},
		{name: "dnsmasq", start: func(_ context.Context, pair *nsPair) (*proc.Child, error) { return startDnsmasq(cfg, pair) }},
	}

	res := map[string]*ServerResult{"anvil": {Name: "anvil"}, "dnsmasq": {Name: "dnsmasq"}}

	// Rounds alternate the servers so that drifts of a noisy host hit both.
	for round := range cfg.Rounds {
		for _, s := range servers {
			var roundProf *profiler
			if round == 0 && s.name == "anvil" {
				roundProf = prof
			}

			best, received, err := searchServer(ctx, cfg, pair, s, round, roundProf)
			if err != nil {
				return nil, err
			}

			r := res[s.name]
			r.Rounds = append(r.Rounds, best)
			r.TotalReceived += received + best.costReceived
			r.CostRounds = append(r.CostRounds, best.cost)
		}
	}

	for _, r := range res {
		if r.TotalReceived == 0 {
			return nil, fmt.Errorf("%s never answered perfdhcp: its figures are meaningless", r.Name)
		}

		r.Best = median(r.Rounds)
		costs := slices.Clone(r.CostRounds)
		slices.Sort(costs)
		r.CPUPerAnswer = costs[len(costs)/2]
	}

	out := &Result{Anvil: *res["anvil"], Dnsmasq: *res["dnsmasq"]}

	if prof != nil && prof.captured {
		out.Profile = prof.path
		if out.ProfileTop, err = profile.Top(ctx, prof.bin, prof.path, 30); err != nil {
			return nil, err
		}
	}

	return out, nil
}

// searchServer starts the server, finds its highest passing rate, and stops it.
// A non-nil prof profiles the server during the cost trial.
func searchServer(ctx context.Context, cfg Config, pair *nsPair, s server, round int, prof *profiler) (Trial, int64, error) {
	srv, err := s.start(ctx, pair)
	if err != nil {
		return Trial{}, 0, err
	}
	defer srv.Stop(5 * time.Second)

	// Warm up and check the server answers at all.
	warm, err := runTrial(ctx, cfg, pair, 500, time.Second)
	if err != nil {
		return Trial{}, 0, fmt.Errorf("%s: %w", s.name, err)
	}

	if warm.Received == 0 {
		return Trial{}, 0, fmt.Errorf("%s did not answer a single PXE DISCOVER (log: %s)", s.name, logPath(cfg, s.name))
	}

	received := warm.Received

	// CPU time per answer at a rate both the client and the servers sustain.
	cpuBefore, err := proc.CPUTime(srv.Pid())
	if err != nil {
		return Trial{}, 0, err
	}

	var profErr chan error

	if prof != nil {
		profErr = make(chan error, 1)

		go func() { profErr <- prof.capture(ctx, max(cfg.Trial-time.Second, time.Second)) }()
	}

	costTrial, err := runTrial(ctx, cfg, pair, cfg.CostRate, cfg.Trial)
	if profErr != nil {
		// Waited for even when the trial failed: the capture is bounded by its own deadline.
		if perr := <-profErr; perr != nil && err == nil {
			err = perr
		}
	}

	if err != nil {
		return Trial{}, 0, fmt.Errorf("%s: %w", s.name, err)
	}

	cpuAfter, err := proc.CPUTime(srv.Pid())
	if err != nil {
		return Trial{}, 0, err
	}

	if costTrial.Received == 0 {
		return Trial{}, 0, fmt.Errorf("%s answered nothing in the cost trial", s.name)
	}

	cost := (cpuAfter - cpuBefore) / time.Duration(costTrial.Received)
	cfg.Log("dhcp round %d %-7s cost at %d/s: %d answers, %.2f%% drops, %.1f µs CPU per answer",
		round+1, s.name, cfg.CostRate, costTrial.Received, costTrial.DropPct, float64(cost)/float64(time.Microsecond))

	try := func(rate int) (Trial, error) {
		// A failing trial is tried again once: a single stall of the host must not end
		// the search.
		var t Trial

		for attempt := range 2 {
			if err := ctx.Err(); err != nil {
				return t, fmt.Errorf("interrupted: %w", err)
			}

			t, err = runTrial(ctx, cfg, pair, rate, cfg.Trial)
			if err != nil {
				return t, fmt.Errorf("%s: %w", s.name, err)
			}

			received += t.Received
			cfg.Log("dhcp round %d %-7s rate %6d: sent %7d received %7d drops %6.2f%% (rcvbuf drops: server %d, perfdhcp %d) %s",
				round+1, s.name, rate, t.Sent, t.Received, t.DropPct, t.ServerBufDrops, t.ClientBufDrops, passText(t.Pass, attempt))

			if t.Pass {
				break
			}
		}

		if exited, perr := srv.Exited(); exited {
			return t, fmt.Errorf("%s exited during the benchmark: %v (log: %s)", s.name, perr, logPath(cfg, s.name))
		}

		return t, nil
	}

	var best Trial

	lo, hi := 0, 0

	for rate := cfg.StartRate; rate <= cfg.MaxRate; rate *= 2 {
		t, err := try(rate)
		if err != nil {
			return Trial{}, 0, err
		}

		if !t.Pass {
			hi = rate

			break
		}

		best, lo = t, rate
	}

	best.cost, best.costReceived = cost, costTrial.Received

	if hi == 0 {
		return best, received, nil // never failed up to MaxRate
	}

	for range cfg.Bisections {
		mid := (lo + hi) / 2
		if mid <= lo {
			break
		}

		t, err := try(mid)
		if err != nil {
			return Trial{}, 0, err
		}

		if t.Pass {
			best, lo = t, mid
			best.cost, best.costReceived = cost, costTrial.Received
		} else {
			hi = mid
		}
	}

	return best, received, nil
}

func passText(pass bool, attempt int) string {
	switch {
	case pass:
		return "pass"
	case attempt == 0:
		return "FAIL (retrying)"
	default:
		return "FAIL"
	}
}

var (
	reSent     = regexp.MustCompile(`(?m)^sent packets: (\d+)`)
	reReceived = regexp.MustCompile(`(?m)^received packets: (\d+)`)
	reDrops    = regexp.MustCompile(`(?m)^drops: (\d+)`)
)

// runTrial runs perfdhcp at rate for period from the client namespace.
func runTrial(ctx context.Context, cfg Config, pair *nsPair, rate int, period time.Duration) (Trial, error) {
	args := []string{"perfdhcp", "-4", "-i",
		"-r", strconv.Itoa(rate),
		"-R", "1000000",
		"-p", strconv.FormatFloat(period.Seconds(), 'f', -1, 64),
		"-l", pair.clientAddr,
	}
	for _, o := range pxeOptions {
		args = append(args, "-o", o)
	}

	args = append(args, pair.serverAddr)

	tctx, cancel := context.WithTimeout(ctx, period+15*time.Second)
	defer cancel()

	srvBefore, err := udpRcvbufErrors(pair.server)
	if err != nil {
		return Trial{}, err
	}

	cliBefore, err := udpRcvbufErrors(pair.client)
	if err != nil {
		return Trial{}, err
	}

	out, err := proc.Run(tctx, netns.Argv(pair.client, proc.Pinned(cfg.ClientCPU, args...)...)...)
	// perfdhcp exits 3 when some exchanges did not complete: that is a drop, not an error.
	if err != nil && proc.ExitCode(err) != 3 {
		return Trial{}, fmt.Errorf("perfdhcp: %w", err)
	}

	t := Trial{Rate: rate}

	srvAfter, err := udpRcvbufErrors(pair.server)
	if err != nil {
		return Trial{}, err
	}

	cliAfter, err := udpRcvbufErrors(pair.client)
	if err != nil {
		return Trial{}, err
	}

	t.ServerBufDrops, t.ClientBufDrops = srvAfter-srvBefore, cliAfter-cliBefore

	var perr error

	t.Sent, perr = match(reSent, out)
	if perr == nil {
		t.Received, perr = match(reReceived, out)
	}

	if perr == nil {
		t.Drops, perr = match(reDrops, out)
	}

	if perr != nil {
		return Trial{}, fmt.Errorf("error parsing perfdhcp output: %w\n%s", perr, out)
	}

	if t.Sent > 0 {
		t.DropPct = 100 * float64(t.Sent-t.Received) / float64(t.Sent)
	}

	t.AnsweredPerSecond = float64(t.Received) / period.Seconds()
	t.Pass = t.Received > 0 && t.DropPct <= cfg.MaxDropPct

	return t, nil
}

func match(re *regexp.Regexp, out string) (int64, error) {
	m := re.FindStringSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("no %q in the output", re.String())
	}

	v, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("error parsing %q: %w", m[1], err)
	}

	return v, nil
}

func median(ts []Trial) Trial {
	s := slices.Clone(ts)
	slices.SortFunc(s, func(a, b Trial) int {
		switch {
		case a.AnsweredPerSecond < b.AnsweredPerSecond:
			return -1
		case a.AnsweredPerSecond > b.AnsweredPerSecond:
			return 1
		default:
			return 0
		}
	})

	return s[len(s)/2]
}

func logPath(cfg Config, name string) string { return filepath.Join(cfg.WorkDir, name+".log") }

func startAnvil(ctx context.Context, cfg Config, pair *nsPair, prof *profiler) (*proc.Child, error) {
	stateDir := filepath.Join(cfg.WorkDir, "anvil-state")
	if err := os.RemoveAll(stateDir); err != nil {
		return nil, fmt.Errorf("error clearing %s: %w", stateDir, err)
	}

	argv := netns.Argv(pair.server, proc.Pinned(cfg.ServerCPU, cfg.ProviderBin,
		"--state-dir", stateDir,
		"--api-advertise-address", pair.serverAddr,
		"--api-listen-address", pair.serverAddr,
		"--dhcp-proxy-iface-or-ip", pair.serverIf,
		"--disable-tftp",
		"--agent-assets-dir", filepath.Join(cfg.WorkDir, "no-agent"),
	)...)

	cmd := exec.Command(argv[0], argv[1:]...)
	if prof != nil {
		cmd.Env = append(os.Environ(), profile.EnvAddr+"="+prof.addr)
	}

	p, err := proc.Start("anvil", cmd, logPath(cfg, "anvil"))
	if err != nil {
		return nil, err
	}

	// The proxy binds before the control socket appears; the socket says "up".
	if err = waitFile(ctx, p, filepath.Join(stateDir, "control.sock"), 15*time.Second); err != nil {
		p.Stop(2 * time.Second)

		return nil, fmt.Errorf("anvil did not start (log: %s): %w", logPath(cfg, "anvil"), err)
	}

	return p, nil
}

func startDnsmasq(cfg Config, pair *nsPair) (*proc.Child, error) {
	argv := netns.Argv(pair.server, proc.Pinned(cfg.ServerCPU, "dnsmasq",
		"--no-daemon", "--conf-file=/dev/null", "--port=0",
		"--dhcp-range="+pair.serverAddr[:len(pair.serverAddr)-1]+"0,proxy",
		"--pxe-service=x86PC,Anvil,undionly",
		"--interface="+pair.serverIf, "--bind-interfaces",
		"--log-facility=-", "--quiet-dhcp",
		"--pid-file=",
	)...)

	p, err := proc.Start("dnsmasq", exec.Command(argv[0], argv[1:]...), logPath(cfg, "dnsmasq"))
	if err != nil {
		return nil, err
	}

	time.Sleep(500 * time.Millisecond) // dnsmasq binds at once; the warm-up trial checks it

	if exited, perr := p.Exited(); exited {
		return nil, fmt.Errorf("dnsmasq exited at start: %v (log: %s)", perr, logPath(cfg, "dnsmasq"))
	}

	return p, nil
}

func waitFile(ctx context.Context, p *proc.Child, path string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)

	for time.Now().Before(deadline) {
		if _, err := os.Stat(path); err == nil {
			return nil
		}

		if exited, err := p.Exited(); exited {
			return fmt.Errorf("exited: %w", errors.Join(err, errors.New("process ended")))
		}

		select {
		case <-ctx.Done():
			return fmt.Errorf("interrupted: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}

	return fmt.Errorf("%s did not appear within %s", path, timeout)
}
