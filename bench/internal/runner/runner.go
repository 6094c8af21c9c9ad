// Package runner is the bench command: flags, the benchmarks in order, the report.
package runner

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/anvil-metal/anvil/bench/internal/dhcpbench"
	"github.com/anvil-metal/anvil/bench/internal/httpbench"
	"github.com/anvil-metal/anvil/bench/internal/loadgen"
	"github.com/anvil-metal/anvil/bench/internal/powerbench"
	"github.com/anvil-metal/anvil/bench/internal/report"
	"github.com/anvil-metal/anvil/bench/internal/stormbench"
	"github.com/anvil-metal/anvil/bench/internal/tftpbench"
	"github.com/anvil-metal/anvil/bench/internal/wipebench"
)

const usage = `usage: bench [flags] dhcp|http|power|wipe|storm|assets|fleet|fleet-etcd|tftp|all

Runs Anvil and a peer on the same load and prints the ratio (root; needs perfdhcp,
dnsmasq, nginx, wrk, taskset, ip). The report is also written to <out>/report.txt.
power (a concurrent against a serial IPMI power sweep over in-process BMCs) needs
neither root nor tools, only the ipmi-sweep binary. wipe (the agent's disk wipe on loop
devices over sparse files, against dd) needs root, losetup and the wipe-disk binary.
fleet (10,000 simulated agents against one provider, SIGKILLed and restarted midway)
needs neither root nor tools, only the fleetsim binary; fleet-etcd (the same fleet on
bbolt and on a 3-member etcd cluster, every machine with a BMC, and a window at rest:
etcd's writes per phase and its history against the quota) needs the etcd binary of
make envtest-assets too, and is not part of all. tftp (10 concurrent fetches of
the iPXE binary from the provider's TFTP and from atftpd, without and with RFC 7440
windows) needs atftpd.
`

// Main runs the command with args (without the program name).
func Main(ctx context.Context, args []string) error {
	if len(args) > 0 && args[0] == "loadgen" {
		return loadgenMain(ctx, args[1:])
	}

	if len(args) > 0 && args[0] == stormbench.ClientCommand {
		return stormbench.ClientMain(ctx, args[1:])
	}

	if len(args) > 0 && args[0] == "tftpload" {
		return tftpbench.LoadMain(ctx, args[1:])
	}

	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}

	var (
		out          = fs.String("out", "_out/bench", "directory of the report, logs and the seeded state")
		provider     = fs.String("provider", "_out/bin/provider", "provider binary (built with go build -o _out/bin/provider ./provider/cmd/provider)")
		serverCPU    = fs.Int("server-cpu", 0, "CPU the servers are pinned to (-1: none)")
		clientCPU    = fs.Int("client-cpu", 1, "CPU the load generators are pinned to (-1: none)")
		dhcpRounds   = fs.Int("dhcp-rounds", 3, "searches of each server's maximum DHCP rate (median counts)")
		dhcpTrial    = fs.Duration("dhcp-trial", 3*time.Second, "perfdhcp run per rate")
		dhcpCostRate = fs.Int("dhcp-cost-rate", 16000, "DISCOVERs/s of the trial measuring the servers' CPU time per answer")
		machines     = fs.Int("machines", 10000, "machines seeded into the provider's state")
		reseed       = fs.Bool("reseed", false, "seed the provider's state again instead of reusing <out>/http/state")
		httpRounds   = fs.Int("http-rounds", 3, "wrk runs per server (median counts)")
		httpDur      = fs.Duration("http-duration", 10*time.Second, "wrk run length")
		connections  = fs.Int("connections", 50, "wrk connections")
		rate         = fs.Int("rate", 1000, "fixed request rate of the latency run")
		latencyDur   = fs.Duration("latency-duration", 20*time.Second, "latency run length")
		profileCPU   = fs.Bool("profile", false, "build a provider serving pprof (go build -overlay, sources untouched) and profile its first HTTP round and its first DHCP cost trial")
		sweepBin     = fs.String("ipmi-sweep", "_out/bin/ipmi-sweep", "sweeper binary (go build -o _out/bin/ipmi-sweep ./provider/cmd/ipmi-sweep)")
		powerBMCs    = fs.Int("power-bmcs", 1000, "simulated BMCs of the power sweep")
		powerSerial  = fs.Int("power-serial", 1000, "BMCs the serial sweep polls (fewer: its time is extrapolated to -power-bmcs)")
		powerLimit   = fs.Duration("power-limit", 3*time.Minute, "bound of the whole power benchmark")
		wipeBin      = fs.String("wipe-disk", "_out/bin/wipe-disk", "wipe command (go build -o _out/bin/wipe-disk ./agent/internal/wipe/cmd/wipe-disk)")
		wipeZeroMiB  = fs.Int64("wipe-zero-mib", 1024, "size of the zero wipe's loop device (MiB)")
		wipeRounds   = fs.Int("wipe-rounds", 3, "runs of each wipe measurement (median counts)")
	)

	storm := stormFlags(fs)
	fleet := fleetFlags(fs)
	fleetEtcd := fleetEtcdFlags(fs)
	tftpOpts := tftpFlags(fs)

	if err := fs.Parse(args); err != nil {
		return err
	}

	if fs.NArg() != 1 {
		fs.Usage()

		return errors.New("want exactly one of dhcp, http, power, wipe, storm, assets, fleet, fleet-etcd, tftp, all")
	}

	which := fs.Arg(0)
	if !slices.Contains([]string{"dhcp", "http", "power", "wipe", "storm", "assets", "fleet", "fleet-etcd", "tftp", "all"}, which) {
		return fmt.Errorf("unknown benchmark %q: want dhcp, http, power, wipe, storm, assets, fleet, fleet-etcd, tftp or all", which)
	}

	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
	}

	if which == "fleet" {
		var rep report.Report

		if err := runFleet(ctx, &rep, fleet, *provider, *out, logf); err != nil {
			return err
		}

		return finish(&rep, *out, loadAverage())
	}

	if which == "fleet-etcd" {
		var rep report.Report

		if err := runFleetEtcd(ctx, &rep, fleet, fleetEtcd, *provider, *out, logf); err != nil {
			return err
		}

		return finish(&rep, *out, loadAverage())
	}

	if which == "power" {
		var rep report.Report

		if err := runPower(ctx, &rep, *sweepBin, *powerBMCs, *powerSerial, *powerLimit, logf); err != nil {
			return err
		}

		return finish(&rep, *out, loadAverage())
	}

	runWipe := func(rep *report.Report) error {
		return wipeBenchmark(ctx, rep, *wipeBin, filepath.Join(*out, "wipe"), *wipeZeroMiB<<20, *wipeRounds, logf)
	}

	if which == "wipe" {
		if os.Geteuid() != 0 {
			return errors.New("the wipe benchmark needs root (loop devices)")
		}

		var rep report.Report

		if err := runWipe(&rep); err != nil {
			return err
		}

		return finish(&rep, *out, loadAverage())
	}

	if os.Geteuid() != 0 {
		return errors.New("the benchmarks need root (network namespaces, binding port 67)")
	}

	tools := []string{"taskset", "ip"}
	if which == "dhcp" || which == "all" {
		tools = append(tools, "perfdhcp", "dnsmasq")
	}

	if which == "storm" {
		tools = append(tools, "dnsmasq")
	}

	if which != "dhcp" && which != "tftp" {
		tools = append(tools, "nginx", "wrk")
	}

	if which == "tftp" || which == "all" {
		tools = append(tools, "atftpd")
	}

	for _, t := range tools {
		if _, err := exec.LookPath(t); err != nil {
			return fmt.Errorf("%s is missing: %w", t, err)
		}
	}

	providerBin, err := filepath.Abs(*provider)
	if err != nil {
		return fmt.Errorf("error resolving the provider path: %w", err)
	}

	if _, err = os.Stat(providerBin); err != nil {
		return fmt.Errorf("no provider binary (go build -o _out/bin/provider ./provider/cmd/provider): %w", err)
	}

	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("error finding the bench binary: %w", err)
	}

	var rep report.Report

	loadStart := loadAverage()

	if which == "dhcp" || which == "all" {
		res, err := dhcpbench.Run(ctx, dhcpbench.Config{
			ProviderBin: providerBin,
			WorkDir:     filepath.Join(*out, "dhcp"),
			Trial:       *dhcpTrial,
			Rounds:      *dhcpRounds,
			StartRate:   4000, MaxRate: 256000, Bisections: 3,
			MaxDropPct: 1, CostRate: *dhcpCostRate,
			ServerCPU: *serverCPU, ClientCPU: *clientCPU,
			Profile: *profileCPU, Repo: ".",
			Log: logf,
		})
		if err != nil {
			return fmt.Errorf("dhcp benchmark: %w", err)
		}

		if res.ProfileTop != "" {
			fmt.Fprintf(os.Stderr, "CPU profile of the provider's ProxyDHCP (%s):\n%s\n", res.Profile, res.ProfileTop)
		}

		addDHCP(&rep, res)
	}

	if which == "http" || which == "all" {
		res, err := httpbench.Run(ctx, httpbench.Config{
			ProviderBin: providerBin, Self: self,
			WorkDir: filepath.Join(*out, "http"), Reseed: *reseed,
			Machines: *machines, SeedInflight: 8,
			Connections: *connections, Duration: *httpDur, Rounds: *httpRounds,
			Rate: *rate, LatencyDuration: *latencyDur,
			ServerCPU: *serverCPU, ClientCPU: *clientCPU,
			Profile: *profileCPU, Repo: ".",
			Log: logf,
		})
		if err != nil {
			return fmt.Errorf("http benchmark: %w", err)
		}

		if res.ProfileTop != "" {
			fmt.Fprintf(os.Stderr, "CPU profile of the provider (%s):\n%s\n", res.Profile, res.ProfileTop)
		}

		addHTTP(&rep, res, *connections, *rate, *machines)
	}

	if which == "storm" || which == "all" {
		if err := runStorm(ctx, &rep, storm, providerBin, self, *out, *serverCPU, *clientCPU, logf); err != nil {
			return err
		}
	}

	if which == "assets" || which == "all" {
		if err := runAssets(ctx, &rep, storm, providerBin, *out, *serverCPU, *clientCPU, logf); err != nil {
			return err
		}
	}

	if which == "tftp" || which == "all" {
		if err := runTFTP(ctx, &rep, tftpOpts, providerBin, self, *out, *serverCPU, *clientCPU, logf); err != nil {
			return err
		}
	}

	if which == "all" {
		if err := runPower(ctx, &rep, *sweepBin, *powerBMCs, *powerSerial, *powerLimit, logf); err != nil {
			return err
		}

		if err := runWipe(&rep); err != nil {
			return err
		}

		if err := runFleet(ctx, &rep, fleet, *provider, *out, logf); err != nil {
			return err
		}
	}

	return finish(&rep, *out, loadStart)
}

func finish(rep *report.Report, out, loadStart string) error {
	rep.Notef("host load average (1, 5, 15 min) at start %s, at end %s: load from outside the benchmark makes figures swing",
		loadStart, loadAverage())

	if err := rep.Write(os.Stdout); err != nil {
		return err
	}

	return rep.Save(filepath.Join(out, "report.txt"))
}

func runPower(ctx context.Context, rep *report.Report, sweepBin string, bmcs, serial int, limit time.Duration, logf func(string, ...any)) error {
	bin, err := filepath.Abs(sweepBin)
	if err != nil {
		return fmt.Errorf("error resolving the ipmi-sweep path: %w", err)
	}

	if _, err = os.Stat(bin); err != nil {
		return fmt.Errorf("no ipmi-sweep binary (go build -o _out/bin/ipmi-sweep ./provider/cmd/ipmi-sweep): %w", err)
	}

	res, err := powerbench.Run(ctx, powerbench.Config{
		SweepBin: bin, BMCs: bmcs, Serial: min(serial, bmcs), Limit: limit, Log: logf,
	})
	if err != nil {
		return fmt.Errorf("power benchmark: %w", err)
	}

	addPower(rep, res)

	return nil
}

func addPower(rep *report.Report, res *powerbench.Result) {
	c, s := res.Concurrent, res.Serial
	serialName := "serial"

	if res.Extrapolated {
		serialName = fmt.Sprintf("serial (%d, extrapolated)", s.BMCs)
	}

	rep.Add(report.Row{
		Name: fmt.Sprintf("IPMI power sweep of %d BMCs, %d at a time", res.BMCs, c.Concurrency), Unit: "s",
		Anvil: c.Took.Seconds(), Peer: res.SerialFull.Seconds(), PeerName: serialName,
		Goal: report.AnvilAtMost, Target: 10,
	})
	rep.Add(report.Row{
		Name: "IPMI power sweep rate", Unit: "BMCs/s",
		Anvil: c.PerSecond(), Peer: s.PerSecond(), PeerName: "serial",
		Goal: report.Info,
	})

	rep.Notef("power: %d go-ipmi BMCs in the bench process on loopback UDP; the sweep (session, Get Chassis Status, Close Session per BMC) runs in ipmi-sweep",
		res.BMCs)
	rep.Notef("power: concurrent %s (%.0f BMCs/s), per BMC p50 %s max %s; serial over %d BMCs %s (%.0f BMCs/s), per BMC p50 %s max %s; serial for %d %s (%s); concurrent is %.1fx faster",
		c.Took.Round(time.Millisecond), c.PerSecond(), c.P50.Round(time.Microsecond), c.Max.Round(time.Microsecond),
		s.BMCs, s.Took.Round(time.Millisecond), s.PerSecond(), s.P50.Round(time.Microsecond), s.Max.Round(time.Microsecond),
		res.BMCs, res.SerialFull.Round(time.Millisecond), map[bool]string{true: "extrapolated from the subset", false: "measured"}[res.Extrapolated],
		res.SerialFull.Seconds()/c.Took.Seconds())
}

func addDHCP(rep *report.Report, res *dhcpbench.Result) {
	rep.Add(report.Row{
		Name: "ProxyDHCP PXE DISCOVER->OFFER at <=1% drops", Unit: "answers/s",
		Anvil: res.Anvil.Best.AnsweredPerSecond, Peer: res.Dnsmasq.Best.AnsweredPerSecond, PeerName: "dnsmasq",
		Goal: report.RatioAtLeast, Target: 1.0,
	})

	rep.Add(report.Row{
		Name: "ProxyDHCP server CPU time per answer (fixed rate)", Unit: "µs",
		Anvil: us(res.Anvil.CPUPerAnswer), Peer: us(res.Dnsmasq.CPUPerAnswer), PeerName: "dnsmasq",
		Goal: report.RatioAtMost, Target: 1.0,
	})

	for _, s := range []dhcpbench.ServerResult{res.Anvil, res.Dnsmasq} {
		var rounds []string
		for _, t := range s.Rounds {
			rounds = append(rounds, fmt.Sprintf("%.0f (rate %d, %.2f%% drops; rcvbuf drops server %d, perfdhcp %d)",
				t.AnsweredPerSecond, t.Rate, t.DropPct, t.ServerBufDrops, t.ClientBufDrops))
		}

		rep.Notef("dhcp %s: best passing trial per round: %v; CPU per answer per round %v; %d answers received in all",
			s.Name, rounds, s.CostRounds, s.TotalReceived)
	}

	rep.Notef("dhcp: drops counted on the perfdhcp side (rcvbuf drops perfdhcp) mean the client, not the server, was the limit")
}

func addHTTP(rep *report.Report, res *httpbench.Result, conns, rate, machines int) {
	rep.Add(report.Row{
		Name: fmt.Sprintf("iPXE boot script, %d machines, %d connections", machines, conns), Unit: "req/s",
		Anvil: res.Anvil.RPS, Peer: res.Nginx.RPS, PeerName: "nginx",
		Goal: report.RatioAtLeast, Target: 0.5,
	})
	rep.Add(report.Row{
		Name: fmt.Sprintf("iPXE boot script p99 at %d req/s (open loop)", rate), Unit: "ms",
		Anvil: res.Anvil.Latency.P99us / 1000, Peer: res.Nginx.Latency.P99us / 1000, PeerName: "nginx",
		Goal: report.AnvilAtMost, Target: 5,
	})
	rep.Add(report.Row{
		Name: fmt.Sprintf("provider RSS after the load, %d machines", machines), Unit: "MB",
		Anvil: float64(res.RSSAfterLoad) / 1e6,
		Goal:  report.AnvilAtMost, Target: 150,
	})

	rep.Add(report.Row{
		Name: "iPXE boot script server CPU per request (wrk rounds)", Unit: "µs",
		Anvil: us(res.Anvil.CPUPerRequest), Peer: us(res.Nginx.CPUPerRequest), PeerName: "nginx",
		Goal: report.Info,
	})

	rep.Notef("http wrk rounds (req/s): anvil %.0f, nginx %.0f; server CPU per request: anvil %v, nginx %v (a CPU ratio <= 2.0x is the req/s goal's, measured the way load from outside the benchmark hardly moves)",
		res.Anvil.Rounds, res.Nginx.Rounds, res.Anvil.CPURounds, res.Nginx.CPURounds)

	for _, s := range []httpbench.Server{res.Anvil, res.Nginx} {
		l := s.Latency
		rep.Notef("http fixed rate %s: %d due, %d ok, %d non-200, %d errors; p50 %.2f ms, p90 %.2f ms, p99 %.2f ms, p99.9 %.2f ms, max %.2f ms",
			s.Name, l.Due, l.OK, l.Non200, l.Errors, l.P50us/1000, l.P90us/1000, l.P99us/1000, l.P999us/1000, l.MaxUs/1000)
	}

	rep.Notef("http scripts: disk %d B, talos %d B, agent %d B; nginx serves a static %d B (the 40/40/20 mix's mean)",
		res.ScriptSizes[httpbench.KindDisk], res.ScriptSizes[httpbench.KindTalos], res.ScriptSizes[httpbench.KindAgent], res.StaticSize)
	rep.Notef("http provider RSS: %.1f MB after seeding/start, %.1f MB after the load", float64(res.RSSAfterSeed)/1e6, float64(res.RSSAfterLoad)/1e6)
	rep.Notef("http provider counters: observations dropped %s; scripts served %s", res.ObservationsDropped, res.ScriptsServed)

	rep.Notef("http anvil by kind (every request for one kind of machine): disk %.0f req/s, talos %.0f req/s, agent %.0f req/s",
		res.ByKind[httpbench.KindDisk], res.ByKind[httpbench.KindTalos], res.ByKind[httpbench.KindAgent])

	if s := res.Seed; s != nil {
		when := "this run"
		if res.SeedReused {
			when = "reused state, seeded " + s.At.Format(time.RFC3339) + "; -reseed to seed again"
		}

		rep.Notef("http seeding (%s): %d machines recorded in %s (%d boot-script requests re-sent: observations dropped), %d transitions in %s (8 in flight); total %s",
			when, s.Machines, s.Discover.Round(time.Millisecond), s.Rerequested, s.Transitioned, s.Transitions.Round(time.Millisecond),
			(s.Discover + s.Transitions).Round(time.Millisecond))
	} else {
		rep.Notef("http seeding: reused a seeded state of unknown timing (-reseed to seed again)")
	}

	if res.Profile != "" {
		rep.Notef("http provider CPU profile: %s (go tool pprof %s)", res.Profile, res.Profile)
	}
}

// loadgenMain is the hidden "loadgen" subcommand: one open-loop run, its result as JSON.
func loadgenMain(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)

	var (
		url      = fs.String("url", "", "base URL")
		machines = fs.Int("machines", 10000, "machines to spread requests over")
		rate     = fs.Int("rate", 1000, "requests per second")
		duration = fs.Duration("duration", 10*time.Second, "run length")
		workers  = fs.Int("workers", 64, "requests in flight at most")
	)

	if err := fs.Parse(args); err != nil {
		return err
	}

	res, err := loadgen.Run(ctx, loadgen.Config{
		BaseURL: *url, Path: httpbench.RandomPath(*machines),
		Rate: *rate, Duration: *duration, Workers: *workers, Timeout: 5 * time.Second,
	})
	if err != nil {
		return fmt.Errorf("loadgen: %w", err)
	}

	b, err := json.Marshal(res)
	if err != nil {
		return fmt.Errorf("error encoding the result: %w", err)
	}

	fmt.Println(string(b))

	return nil
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// loadAverage is the first three fields of /proc/loadavg.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}

	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}

	return strings.Join(f[:3], " ")
}

func wipeBenchmark(ctx context.Context, rep *report.Report, wipeBin, workDir string, zeroSize int64, rounds int, logf func(string, ...any)) error {
	bin, err := filepath.Abs(wipeBin)
	if err != nil {
		return fmt.Errorf("error resolving the wipe-disk path: %w", err)
	}

	if _, err = os.Stat(bin); err != nil {
		return fmt.Errorf("no wipe-disk binary (go build -o _out/bin/wipe-disk ./agent/internal/wipe/cmd/wipe-disk): %w", err)
	}

	res, err := wipebench.Run(ctx, wipebench.Config{WipeBin: bin, WorkDir: workDir, ZeroSize: zeroSize, Rounds: max(rounds, 1), Log: logf})
	if err != nil {
		return fmt.Errorf("wipe benchmark: %w", err)
	}

	rep.Add(report.Row{
		Name: "fast wipe, 1 TiB sparse loop device (peer: the same on 10 GiB)", Unit: "ms",
		Anvil: ms(res.FastLarge), Peer: ms(res.FastSmall), PeerName: "anvil 10 GiB",
		Goal: report.RatioAtMost, Target: 2,
	})
	rep.Add(report.Row{
		Name: fmt.Sprintf("zero wipe throughput, %d MiB loop device", res.ZeroSize>>20), Unit: "MB/s",
		Anvil: res.ZeroMBps(), Peer: res.DDMBps(), PeerName: "dd bs=4M oflag=direct",
		Goal: report.RatioAtLeast, Target: 0.8,
	})

	rep.Add(report.Row{
		Name: fmt.Sprintf("zero wipe throughput, %d MiB loop device, dd syncing too", res.ZeroSize>>20), Unit: "MB/s",
		Anvil: res.ZeroMBps(), Peer: res.DDSyncMBps(), PeerName: "dd ... conv=fsync",
		Goal: report.Info,
	})

	rep.Notef("wipe: fast %q; zero %q; times are the wipe's own (open, write, sync, read-back verification), medians of %d",
		res.FastMethod, res.ZeroMethod, len(res.ZeroRounds))
	rep.Notef("wipe: zero wipe rounds %v; dd rounds %v; dd conv=fsync rounds %v (dd's wall time, process start included)", res.ZeroRounds, res.DDRounds, res.DDSyncRounds)
	rep.Notef("wipe: loop devices attached with --direct-io=on, so dd's direct writes and the wipe's both reach the host disk; the wipe also syncs and reads samples back")

	return nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
