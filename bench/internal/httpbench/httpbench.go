package httpbench

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/anvil-metal/anvil/bench/internal/loadgen"
	"github.com/anvil-metal/anvil/bench/internal/profile"
	"github.com/anvil-metal/anvil/internal/freeport"
	"github.com/anvil-metal/anvil/internal/proc"
)

// Config configures the benchmark.
type Config struct {
	ProviderBin string
	// Self is the bench binary, re-run as "loadgen" for the fixed-rate test.
	Self string
	// WorkDir holds logs, nginx's files and (under state/) the seeded provider state,
	// kept for the next run unless Reseed.
	WorkDir string
	Reseed  bool

	Machines, SeedInflight int

	// Throughput: wrk with Connections for Duration, Rounds times per server.
	Connections int
	Duration    time.Duration
	Rounds      int

	// Latency: open-loop Rate for LatencyDuration.
	Rate            int
	LatencyDuration time.Duration

	ServerCPU, ClientCPU int

	// Profile builds a provider serving pprof (Repo is the module root) and keeps a CPU
	// profile of its first throughput round.
	Profile bool
	Repo    string

	Log func(format string, args ...any)
}

// Server is one server's figures.
type Server struct {
	Name string
	// RPS is the median over rounds of wrk's requests per second; Rounds all of them.
	RPS    float64
	Rounds []float64
	// Latency is the fixed-rate run.
	Latency *loadgen.Result
	// CPUPerRequest is the median over rounds of the server's CPU time (user + system)
	// per request served in a wrk round: unlike req/s, it hardly moves with load from
	// outside the benchmark. CPURounds holds all of them.
	CPUPerRequest time.Duration
	CPURounds     []time.Duration
}

// Result is the outcome of the benchmark.
type Result struct {
	Anvil, Nginx Server
	Seed         *SeedStats
	SeedReused   bool // Seed is from the run that seeded the reused state
	ScriptSizes  map[Kind]int
	StaticSize   int
	RSSAfterSeed int64
	RSSAfterLoad int64
	// ObservationsDropped is the provider's anvil_pxe_observations_dropped_total after
	// the load.
	ObservationsDropped string
	ScriptsServed       string
	// ByKind is Anvil's throughput with every request for machines of one kind.
	ByKind map[Kind]float64
	// Profile is the CPU profile's path and its summary, when profiling.
	Profile, ProfileTop string
}

// Run runs the benchmark. Processes are stopped before it returns.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := os.MkdirAll(cfg.WorkDir, 0o755); err != nil {
		return nil, fmt.Errorf("error creating %s: %w", cfg.WorkDir, err)
	}

	res := &Result{Anvil: Server{Name: "anvil"}, Nginx: Server{Name: "nginx"}}

	anvilPort, err := freeport.TCP()
	if err != nil {
		return nil, err
	}

	anvilURL := "http://127.0.0.1:" + strconv.Itoa(anvilPort)

	factory, err := StartFactory()
	if err != nil {
		return nil, err
	}
	defer factory.Close()

	var pprofAddr string

	if cfg.Profile {
		if cfg.ProviderBin, err = profile.BuildProvider(ctx, cfg.Repo, cfg.WorkDir); err != nil {
			return nil, err
		}

		port, err := freeport.TCP()
		if err != nil {
			return nil, err
		}

		pprofAddr = "127.0.0.1:" + strconv.Itoa(port)
	}

	provider, ctl, err := startProvider(ctx, cfg, anvilPort, factory.URL, pprofAddr)
	if err != nil {
		return nil, err
	}
	defer provider.Stop(10 * time.Second)
	defer ctl.Close()

	ids, err := ctl.MachineIDs(ctx)
	if err != nil {
		return nil, err
	}

	marker := filepath.Join(stateDir(cfg), "seeded")

	if prev, merr := os.ReadFile(marker); merr == nil && len(ids) == cfg.Machines {
		cfg.Log("http: reusing the seeded state in %s (%d machines)", stateDir(cfg), len(ids))

		res.Seed = &SeedStats{}
		if json.Unmarshal(prev, res.Seed) == nil {
			res.SeedReused = true
		} else {
			res.Seed = nil
		}
	} else {
		if len(ids) != 0 {
			return nil, fmt.Errorf("state %s holds %d machines but is not a complete seed: run with -reseed", stateDir(cfg), len(ids))
		}

		cfg.Log("http: seeding %d machines (%d in flight)", cfg.Machines, cfg.SeedInflight)

		res.Seed, err = Seed(ctx, anvilURL, ctl, cfg.Machines, cfg.SeedInflight)
		if err != nil {
			return nil, fmt.Errorf("error seeding: %w", err)
		}

		seeded, err := json.Marshal(res.Seed)
		if err != nil {
			return nil, fmt.Errorf("error encoding the seed stats: %w", err)
		}

		if err = os.WriteFile(marker, seeded, 0o644); err != nil {
			return nil, fmt.Errorf("error writing %s: %w", marker, err)
		}

		cfg.Log("http: seeded in %s (recorded %s, transitions %s)",
			(res.Seed.Discover + res.Seed.Transitions).Round(time.Millisecond),
			res.Seed.Discover.Round(time.Millisecond), res.Seed.Transitions.Round(time.Millisecond))
	}

	if res.RSSAfterSeed, err = proc.RSSBytes(provider.Pid()); err != nil {
		return nil, err
	}

	if res.ScriptSizes, err = ScriptSizes(ctx, anvilURL); err != nil {
		return nil, err
	}

	var mean float64
	for k, share := range Mix {
		mean += share * float64(res.ScriptSizes[k])
	}

	res.StaticSize = int(math.Round(mean))

	nginxPort, err := freeport.TCP()
	if err != nil {
		return nil, err
	}

	nginxURL := "http://127.0.0.1:" + strconv.Itoa(nginxPort)

	nginx, err := startNginx(ctx, cfg, nginxPort, res.StaticSize)
	if err != nil {
		return nil, err
	}
	defer nginx.Stop(5 * time.Second)

	script := filepath.Join(cfg.WorkDir, "machines.lua")
	if err = os.WriteFile(script, []byte(WrkScript(cfg.Machines)), 0o644); err != nil {
		return nil, fmt.Errorf("error writing the wrk script: %w", err)
	}

	// Warm both up (connections, caches, the Go heap's size).
	for _, u := range []string{anvilURL, nginxURL} {
		if _, err := runWrk(ctx, cfg, script, u, 2*time.Second); err != nil {
			return nil, err
		}
	}

	for round := range cfg.Rounds {
		for _, s := range []struct {
			srv *Server
			url string
			p   *proc.Child
		}{{&res.Anvil, anvilURL, provider}, {&res.Nginx, nginxURL, nginx}} {
			var profErr chan error

			if pprofAddr != "" && round == 0 && s.p == provider {
				res.Profile = filepath.Join(cfg.WorkDir, "anvil-cpu.prof")
				profErr = make(chan error, 1)

				go func() {
					profErr <- profile.Capture(ctx, pprofAddr, max(cfg.Duration-2*time.Second, time.Second), res.Profile)
				}()
			}

			cpuBefore, err := proc.CPUTime(s.p.Pid())
			if err != nil {
				return nil, err
			}

			rps, requests, err := runWrkCount(ctx, cfg, script, s.url, cfg.Duration)
			if err != nil {
				return nil, err
			}

			cpuAfter, err := proc.CPUTime(s.p.Pid())
			if err != nil {
				return nil, err
			}

			var perRequest time.Duration
			if requests > 0 {
				perRequest = (cpuAfter - cpuBefore) / time.Duration(requests)
				s.srv.CPURounds = append(s.srv.CPURounds, perRequest)
			}

			if profErr != nil {
				if err := <-profErr; err != nil {
					return nil, err
				}

				if res.ProfileTop, err = profile.Top(ctx, cfg.ProviderBin, res.Profile, 30); err != nil {
					return nil, err
				}
			}

			if exited, perr := s.p.Exited(); exited {
				return nil, fmt.Errorf("%s exited under load: %v", s.srv.Name, perr)
			}

			s.srv.Rounds = append(s.srv.Rounds, rps)
			cfg.Log("http round %d %-5s %d connections: %.0f req/s, %.1f µs CPU per request", round+1, s.srv.Name, cfg.Connections, rps,
				float64(perRequest)/float64(time.Microsecond))
		}
	}

	res.ByKind = map[Kind]float64{}

	for _, k := range []Kind{KindDisk, KindTalos, KindAgent} {
		kindScript := filepath.Join(cfg.WorkDir, "machines-"+k.String()+".lua")
		if err = os.WriteFile(kindScript, []byte(WrkScript(cfg.Machines, k)), 0o644); err != nil {
			return nil, fmt.Errorf("error writing the wrk script: %w", err)
		}

		if res.ByKind[k], err = runWrk(ctx, cfg, kindScript, anvilURL, max(cfg.Duration/2, time.Second)); err != nil {
			return nil, err
		}

		cfg.Log("http anvil, %s machines only: %.0f req/s", k, res.ByKind[k])
	}

	res.Anvil.RPS = median(res.Anvil.Rounds)
	res.Nginx.RPS = median(res.Nginx.Rounds)
	res.Anvil.CPUPerRequest = medianDuration(res.Anvil.CPURounds)
	res.Nginx.CPUPerRequest = medianDuration(res.Nginx.CPURounds)

	for _, s := range []struct {
		srv *Server
		url string
	}{{&res.Anvil, anvilURL}, {&res.Nginx, nginxURL}} {
		if s.srv.Latency, err = runFixedRate(ctx, cfg, s.url); err != nil {
			return nil, err
		}

		l := s.srv.Latency
		cfg.Log("http fixed %d req/s %-5s: ok %d non200 %d errors %d, p50 %.2f ms p99 %.2f ms p99.9 %.2f ms max %.2f ms",
			cfg.Rate, s.srv.Name, l.OK, l.Non200, l.Errors, l.P50us/1000, l.P99us/1000, l.P999us/1000, l.MaxUs/1000)

		if l.OK == 0 || l.Non200+l.Errors > l.Due/100 {
			return nil, fmt.Errorf("%s failed the fixed-rate run: %d ok, %d non-200, %d errors (%s)", s.srv.Name, l.OK, l.Non200, l.Errors, l.FirstErr)
		}
	}

	if res.RSSAfterLoad, err = proc.RSSBytes(provider.Pid()); err != nil {
		return nil, err
	}

	res.ObservationsDropped, res.ScriptsServed = providerMetrics(ctx, anvilURL)

	return res, nil
}

func stateDir(cfg Config) string { return filepath.Join(cfg.WorkDir, "state") }

func startProvider(ctx context.Context, cfg Config, port int, factoryURL, pprofAddr string) (*proc.Child, *Control, error) {
	dir := stateDir(cfg)

	if cfg.Reseed {
		if err := os.RemoveAll(dir); err != nil {
			return nil, nil, fmt.Errorf("error clearing %s: %w", dir, err)
		}
	}

	assets := filepath.Join(cfg.WorkDir, "agent")
	if err := FakeAgentAssets(assets); err != nil {
		return nil, nil, err
	}

	logPath := filepath.Join(cfg.WorkDir, "anvil.log")

	var env []string
	if pprofAddr != "" {
		env = []string{profile.EnvAddr + "=" + pprofAddr}
	}

	argv := proc.Pinned(cfg.ServerCPU, cfg.ProviderBin,
		"--state-dir", dir,
		"--api-listen-address", "127.0.0.1",
		"--api-advertise-address", "127.0.0.1",
		"--api-port", strconv.Itoa(port),
		"--disable-dhcp-proxy", "--disable-tftp",
		// The benchmark measures the boot services: no console beside them.
		"--ui-listen-address", "",
		// The mix's Talos scripts boot from the factory's PXE endpoint, as nginx's copy
		// does: no boot-asset cache (which would download Talos, and serve it from disk).
		"--image-cache-size", "0",
		// The seeded machines have no BMC: nothing for an agent to provision, so an
		// allocated machine boots Talos (the mix's talos scripts), not the agent first.
		"--provision-bmc-credentials=false",
		// The seed records its machines from boot scripts alone (they have no agent):
		// room for all of them past the bound on made-up machines.
		"--max-pending-machines", strconv.Itoa(max(cfg.Machines, 1024)),
		"--agent-assets-dir", assets,
		"--image-factory-base-url", factoryURL,
		// The provider fetches the schematic's cmdline from it once, then keeps it; the
		// kernel and initramfs URLs are only written into scripts.
		"--image-factory-pxe-base-url", factoryURL,
	)

	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)

	p, err := proc.Start("anvil", cmd, logPath)
	if err != nil {
		return nil, nil, err
	}

	if err = p.WaitTCP(ctx, "127.0.0.1:"+strconv.Itoa(port), 60*time.Second); err != nil {
		p.Stop(2 * time.Second)

		return nil, nil, fmt.Errorf("%w (log: %s)", err, logPath)
	}

	sock := filepath.Join(dir, "control.sock")

	for deadline := time.Now().Add(30 * time.Second); ; {
		if _, err = os.Stat(sock); err == nil {
			break
		}

		if time.Now().After(deadline) || ctx.Err() != nil {
			p.Stop(2 * time.Second)

			return nil, nil, fmt.Errorf("no control socket %s (log: %s)", sock, logPath)
		}

		time.Sleep(50 * time.Millisecond)
	}

	ctl, err := Dial(sock)
	if err != nil {
		p.Stop(2 * time.Second)

		return nil, nil, err
	}

	return p, ctl, nil
}

// FakeAgentAssets writes tiny agent boot assets into dir so that the provider starts and
// renders its real agent script (kernel, initrd and a signed token); the benchmarks
// using them never fetch their content.
func FakeAgentAssets(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("error creating %s: %w", dir, err)
	}

	files := map[string]string{
		"vmlinuz-amd64":      "not a kernel\n",
		"initramfs-amd64.xz": "not an initramfs\n",
		"cmdline-amd64":      "console=ttyS0 console=tty0 printk.devkmsg=on\n",
	}

	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return fmt.Errorf("error writing %s: %w", name, err)
		}
	}

	return nil
}

const nginxConf = `daemon off;
master_process off;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/nginx-error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path %[1]s/tmp;
  proxy_temp_path %[1]s/tmp;
  fastcgi_temp_path %[1]s/tmp;
  uwsgi_temp_path %[1]s/tmp;
  scgi_temp_path %[1]s/tmp;
  keepalive_requests 100000000;
  keepalive_timeout 75s;
  server {
    listen 127.0.0.1:%[2]d;
    root %[1]s/www;
    location / {
      default_type "text/plain; charset=utf-8";
      add_header Cache-Control no-store;
      try_files /boot.ipxe =404;
    }
  }
}
`

// startNginx serves a static script of size bytes for any path.
func startNginx(ctx context.Context, cfg Config, port, size int) (*proc.Child, error) {
	dir, err := filepath.Abs(filepath.Join(cfg.WorkDir, "nginx"))
	if err != nil {
		return nil, fmt.Errorf("error resolving the nginx directory: %w", err)
	}

	for _, d := range []string{"www", "tmp"} {
		if err = os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, fmt.Errorf("error creating the nginx directory: %w", err)
		}
	}

	// A comment pads the script to the size of Anvil's average answer.
	const head, foot = "#!ipxe\n# ", "\nexit\n"
	body := head + strings.Repeat("x", max(size-len(head)-len(foot), 0)) + foot

	if err = os.WriteFile(filepath.Join(dir, "www", "boot.ipxe"), []byte(body), 0o644); err != nil {
		return nil, fmt.Errorf("error writing the static script: %w", err)
	}

	conf := filepath.Join(dir, "nginx.conf")
	if err = os.WriteFile(conf, fmt.Appendf(nil, nginxConf, dir, port), 0o644); err != nil {
		return nil, fmt.Errorf("error writing the nginx configuration: %w", err)
	}

	logPath := filepath.Join(cfg.WorkDir, "nginx.log")

	argv := proc.Pinned(cfg.ServerCPU, "nginx", "-p", dir, "-c", conf, "-e", filepath.Join(dir, "nginx-error.log"))

	p, err := proc.Start("nginx", exec.Command(argv[0], argv[1:]...), logPath)
	if err != nil {
		return nil, err
	}

	if err = p.WaitTCP(ctx, "127.0.0.1:"+strconv.Itoa(port), 10*time.Second); err != nil {
		p.Stop(2 * time.Second)

		return nil, fmt.Errorf("%w (log: %s)", err, logPath)
	}

	return p, nil
}

var (
	reRPS    = regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)
	reNon2xx = regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)`)
	reSocket = regexp.MustCompile(`Socket errors: (.*)`)
	// "  123456 requests in 10.00s, 45.67MB read"
	reRequests = regexp.MustCompile(`(\d+) requests in `)
)

// runWrk runs wrk against base with random machines' URLs and returns requests/s.
func runWrk(ctx context.Context, cfg Config, script, base string, d time.Duration) (float64, error) {
	rps, _, err := runWrkCount(ctx, cfg, script, base, d)

	return rps, err
}

// runWrkCount is runWrk that also returns how many requests wrk completed.
func runWrkCount(ctx context.Context, cfg Config, script, base string, d time.Duration) (float64, int64, error) {
	wctx, cancel := context.WithTimeout(ctx, d+20*time.Second)
	defer cancel()

	out, err := proc.Run(wctx, proc.Pinned(cfg.ClientCPU, "wrk", "-t1", "-c"+strconv.Itoa(cfg.Connections),
		"-d"+strconv.Itoa(int(d.Seconds()))+"s", "-s", script, base)...)
	if err != nil {
		return 0, 0, fmt.Errorf("wrk: %w", err)
	}

	if m := reNon2xx.FindStringSubmatch(out); m != nil {
		return 0, 0, fmt.Errorf("wrk against %s got %s non-2xx answers:\n%s", base, m[1], out)
	}

	if m := reSocket.FindStringSubmatch(out); m != nil {
		return 0, 0, fmt.Errorf("wrk against %s had socket errors (%s):\n%s", base, m[1], out)
	}

	m := reRPS.FindStringSubmatch(out)
	if m == nil {
		return 0, 0, fmt.Errorf("no Requests/sec in wrk's output:\n%s", out)
	}

	rps, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, 0, fmt.Errorf("error parsing wrk's rate %q: %w", m[1], err)
	}

	var requests int64
	if m := reRequests.FindStringSubmatch(out); m != nil {
		requests, _ = strconv.ParseInt(m[1], 10, 64)
	}

	return rps, requests, nil
}

// runFixedRate runs the loadgen, pinned to the client CPU, against base.
func runFixedRate(ctx context.Context, cfg Config, base string) (*loadgen.Result, error) {
	lctx, cancel := context.WithTimeout(ctx, cfg.LatencyDuration+30*time.Second)
	defer cancel()

	out, err := proc.Run(lctx, proc.Pinned(cfg.ClientCPU, cfg.Self, "loadgen",
		"-url", base, "-machines", strconv.Itoa(cfg.Machines),
		"-rate", strconv.Itoa(cfg.Rate), "-duration", cfg.LatencyDuration.String())...)
	if err != nil {
		return nil, fmt.Errorf("loadgen: %w", err)
	}

	var res loadgen.Result
	if err = json.Unmarshal([]byte(out[strings.LastIndexByte(strings.TrimSpace(out), '\n')+1:]), &res); err != nil {
		return nil, fmt.Errorf("error parsing the loadgen output %q: %w", out, err)
	}

	return &res, nil
}

// providerMetrics scrapes the two counters that tell whether the load was served as
// intended.
func providerMetrics(ctx context.Context, base string) (dropped, served string) {
	client := &http.Client{Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()

	body, err := get(ctx, client, base+"/metrics")
	if err != nil {
		return "?", "?"
	}

	dropped = "0"

	var kinds []string

	for line := range strings.SplitSeq(body, "\n") {
		switch {
		case strings.HasPrefix(line, "anvil_pxe_observations_dropped_total "):
			dropped = strings.Fields(line)[1]
		case strings.HasPrefix(line, "anvil_boot_scripts_total{"):
			kinds = append(kinds, strings.TrimPrefix(line, "anvil_boot_scripts_total"))
		}
	}

	return dropped, strings.Join(kinds, " ")
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}

	s := slices.Clone(v)
	slices.Sort(s)

	return s[len(s)/2]
}

func medianDuration(v []time.Duration) time.Duration {
	if len(v) == 0 {
		return 0
	}

	s := slices.Clone(v)
	slices.Sort(s)

	return s[len(s)/2]
}
