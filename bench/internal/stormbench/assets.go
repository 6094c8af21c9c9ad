package stormbench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/anvil-metal/anvil/internal/freeport"
	"github.com/anvil-metal/anvil/internal/proc"
)

// AssetsConfig configures the asset-serving benchmark: Connections clients download
// the agent's initramfs over and over from Anvil and from nginx on loopback.
type AssetsConfig struct {
	ProviderBin string
	WorkDir     string
	// AssetsDir: as Config's (real assets, or fake ones of their size under WorkDir).
	AssetsDir            string
	Connections          int
	Duration             time.Duration
	Rounds               int
	ServerCPU, ClientCPU int
	Log                  func(format string, args ...any)
}

// AssetsResult is the benchmark's outcome: bytes per second, medians over rounds.
type AssetsResult struct {
	File                     string
	Size                     int64
	Anvil, Nginx             float64
	AnvilRounds, NginxRounds []float64
	// AnvilCPU, NginxCPU are the servers' CPU seconds per GB served, the median round.
	AnvilCPU, NginxCPU float64
}

// RunAssets runs the benchmark; its processes are stopped before it returns.
func RunAssets(ctx context.Context, cfg AssetsConfig) (*AssetsResult, error) {
	if cfg.Log == nil {
		cfg.Log = func(string, ...any) {}
	}

	sc := &Config{WorkDir: cfg.WorkDir, AssetsDir: cfg.AssetsDir}
	if err := prepare(sc); err != nil {
		return nil, err
	}

	res := &AssetsResult{File: sc.initramfsName()}

	var err error
	if _, res.Size, err = sc.assetSizes(); err != nil {
		return nil, err
	}

	anvilPort, err := freeport.TCP()
	if err != nil {
		return nil, err
	}

	nginxPort, err := freeport.TCP()
	if err != nil {
		return nil, err
	}

	anvil, err := startLoopbackAnvil(ctx, &cfg, sc, anvilPort)
	if err != nil {
		return nil, err
	}
	defer anvil.Stop(10 * time.Second)

	nginx, err := startLoopbackNginx(ctx, &cfg, sc, nginxPort)
	if err != nil {
		return nil, err
	}
	defer nginx.Stop(5 * time.Second)

	servers := []struct {
		name   string
		p      *proc.Child
		url    string
		rounds *[]float64
		cpu    []float64
	}{
		{"anvil", anvil, fmt.Sprintf("http://127.0.0.1:%d/assets/agent/%s", anvilPort, res.File), &res.AnvilRounds, nil},
		{"nginx", nginx, fmt.Sprintf("http://127.0.0.1:%d/assets/agent/%s", nginxPort, res.File), &res.NginxRounds, nil},
	}

	// Warm up: connections, page cache, the Go heap's size.
	for _, s := range servers {
		if _, err := runWrkBytes(ctx, &cfg, s.url, 2*time.Second); err != nil {
			return nil, fmt.Errorf("%s: %w", s.name, err)
		}
	}

	// Rounds alternate the servers so that drifts of a noisy host hit both.
	for round := range max(cfg.Rounds, 1) {
		for i := range servers {
			s := &servers[i]

			before, err := proc.CPUTime(s.p.Pid())
			if err != nil {
				return nil, err
			}

			bps, err := runWrkBytes(ctx, &cfg, s.url, cfg.Duration)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", s.name, err)
			}

			after, err := proc.CPUTime(s.p.Pid())
			if err != nil {
				return nil, err
			}

			if gone, perr := s.p.Exited(); gone {
				return nil, fmt.Errorf("%s exited under load: %v", s.name, perr)
			}

			*s.rounds = append(*s.rounds, bps)
			s.cpu = append(s.cpu, (after-before).Seconds()/(bps*cfg.Duration.Seconds()/1e9))
			cfg.Log("assets round %d %-5s %d connections: %.0f MB/s, %.2f CPU s per GB", round+1, s.name, cfg.Connections, bps/1e6, s.cpu[len(s.cpu)-1])
		}
	}

	res.Anvil, res.AnvilCPU = median(res.AnvilRounds), median(servers[0].cpu)
	res.Nginx, res.NginxCPU = median(res.NginxRounds), median(servers[1].cpu)

	return res, nil
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}

	s := slices.Clone(v)
	slices.Sort(s)

	return s[len(s)/2]
}

func startLoopbackAnvil(ctx context.Context, cfg *AssetsConfig, sc *Config, port int) (*proc.Child, error) {
	state := filepath.Join(cfg.WorkDir, "assets-anvil-state")
	if err := os.RemoveAll(state); err != nil {
		return nil, fmt.Errorf("error clearing %s: %w", state, err)
	}

	log := filepath.Join(cfg.WorkDir, "assets-anvil.log")
	argv := proc.Pinned(cfg.ServerCPU, cfg.ProviderBin,
		"--state-dir", state,
		"--api-listen-address", "127.0.0.1", "--api-advertise-address", "127.0.0.1",
		"--api-port", strconv.Itoa(port),
		"--disable-dhcp-proxy", "--disable-tftp",
		"--ui-listen-address", "", "--image-cache-size", "0",
		"--agent-assets-dir", sc.assetsDir(),
		"--image-factory-base-url", "http://127.0.0.1:9", "--image-factory-pxe-base-url", "http://127.0.0.1:9",
	)

	p, err := proc.Start("anvil", exec.Command(argv[0], argv[1:]...), log)
	if err != nil {
		return nil, err
	}

	if err := p.WaitTCP(ctx, "127.0.0.1:"+strconv.Itoa(port), 60*time.Second); err != nil {
		p.Stop(2 * time.Second)

		return nil, fmt.Errorf("%w (log: %s)", err, log)
	}

	return p, nil
}

func startLoopbackNginx(ctx context.Context, cfg *AssetsConfig, sc *Config, port int) (*proc.Child, error) {
	dir, err := filepath.Abs(filepath.Join(cfg.WorkDir, "assets-nginx"))
	if err != nil {
		return nil, fmt.Errorf("error resolving the nginx directory: %w", err)
	}

	assets, err := filepath.Abs(sc.assetsDir())
	if err != nil {
		return nil, fmt.Errorf("error resolving the assets directory: %w", err)
	}

	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("error clearing %s: %w", dir, err)
	}

	for _, d := range []string{filepath.Join(dir, "www", "assets"), filepath.Join(dir, "tmp")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("error creating %s: %w", d, err)
		}
	}

	if err := os.Symlink(assets, filepath.Join(dir, "www", "assets", "agent")); err != nil {
		return nil, fmt.Errorf("error linking the assets: %w", err)
	}

	conf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, nginxConf, dir, "127.0.0.1", port), 0o644); err != nil {
		return nil, fmt.Errorf("error writing the nginx configuration: %w", err)
	}

	log := filepath.Join(cfg.WorkDir, "assets-nginx.log")
	argv := proc.Pinned(cfg.ServerCPU, "nginx", "-p", dir, "-c", conf, "-e", filepath.Join(dir, "error.log"))

	p, err := proc.Start("nginx", exec.Command(argv[0], argv[1:]...), log)
	if err != nil {
		return nil, err
	}

	if err := p.WaitTCP(ctx, "127.0.0.1:"+strconv.Itoa(port), 10*time.Second); err != nil {
		p.Stop(2 * time.Second)

		return nil, fmt.Errorf("%w (log: %s)", err, log)
	}

	return p, nil
}

var (
	reTransfer = regexp.MustCompile(`Transfer/sec:\s+([0-9.]+)([KMG]?B)`)
	reNon2xx   = regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)`)
	reSocket   = regexp.MustCompile(`Socket errors: (.*)`)
)

// runWrkBytes runs wrk against url for d and returns the bytes per second it read.
func runWrkBytes(ctx context.Context, cfg *AssetsConfig, url string, d time.Duration) (float64, error) {
	wctx, cancel := context.WithTimeout(ctx, d+30*time.Second)
	defer cancel()

	out, err := proc.Run(wctx, proc.Pinned(cfg.ClientCPU, "wrk", "-t1", "-c"+strconv.Itoa(cfg.Connections),
		"-d"+strconv.Itoa(max(int(d.Seconds()), 1))+"s", "--timeout", "30s", url)...)
	if err != nil {
		return 0, fmt.Errorf("wrk: %w", err)
	}

	return parseWrkBytes(out)
}

// parseWrkBytes reads wrk's Transfer/sec (binary units) and refuses a run with errors.
func parseWrkBytes(out string) (float64, error) {
	if m := reNon2xx.FindStringSubmatch(out); m != nil {
		return 0, fmt.Errorf("wrk got %s non-2xx answers:\n%s", m[1], out)
	}

	if m := reSocket.FindStringSubmatch(out); m != nil {
		return 0, fmt.Errorf("wrk had socket errors (%s):\n%s", m[1], out)
	}

	m := reTransfer.FindStringSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("no Transfer/sec in wrk's output:\n%s", out)
	}

	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, fmt.Errorf("error parsing wrk's transfer rate %q: %w", m[1], err)
	}

	unit := map[string]float64{"B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30}[m[2]]

	return v * unit, nil
}
