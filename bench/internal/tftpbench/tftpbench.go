// Package tftpbench measures TFTP throughput: concurrent clients fetching the iPXE binary
// from Anvil's TFTP server (the provider's, on loopback) and from atftpd, the same client
// and options against both, without and with RFC 7440 windows.
package tftpbench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/anvil-metal/anvil/bench/internal/httpbench"
	"github.com/anvil-metal/anvil/internal/freeport"
	"github.com/anvil-metal/anvil/internal/proc"
	"github.com/anvil-metal/anvil/internal/tftp"
)

// Config configures the benchmark.
type Config struct {
	// ProviderBin is the provider binary; Self is the bench binary (its tftpload
	// subcommand is the client).
	ProviderBin, Self string
	// WorkDir holds the served copy of the file, logs and the provider's throwaway state.
	WorkDir string
	// File is the binary served (an iPXE binary).
	File string
	// Concurrency clients each fetch the file Transfers times per trial.
	Concurrency, Transfers int
	// Rounds is trials per server and window size, alternating servers; the median counts.
	Rounds int
	// BlockSize is the blksize asked for; Windows the window sizes measured, 0 for none.
	BlockSize int
	Windows   []int
	// ServerCPU, ClientCPU pin the servers and the client (-1: not pinned).
	ServerCPU, ClientCPU int
	// Log receives progress lines.
	Log func(format string, args ...any)
}

// Server is one server's trials at one window size.
type Server struct {
	Name   string
	Trials []LoadResult
	// CPU is the server's CPU time in each trial.
	CPU []time.Duration
}

// Median is the trial of median throughput.
func (s Server) Median() LoadResult {
	if len(s.Trials) == 0 {
		return LoadResult{}
	}

	t := slices.Clone(s.Trials)
	slices.SortFunc(t, func(a, b LoadResult) int {
		switch {
		case a.MBps() < b.MBps():
			return -1
		case a.MBps() > b.MBps():
			return 1
		}

		return 0
	})

	return t[len(t)/2]
}

// CPUPerMB is the server's median CPU time per MB sent, in milliseconds.
func (s Server) CPUPerMB() float64 {
	var per []float64

	for i, t := range s.Trials {
		if t.Bytes > 0 && i < len(s.CPU) {
			per = append(per, float64(s.CPU[i].Milliseconds())/(float64(t.Bytes)/1e6))
		}
	}

	if len(per) == 0 {
		return 0
	}

	slices.Sort(per)

	return per[len(per)/2]
}

// Case is both servers at one window size.
type Case struct {
	Window        int
	Anvil, Atftpd Server
}

// Result is the whole benchmark.
type Result struct {
	File  string
	Size  int64
	Cases []Case
}

// Run runs the benchmark. Everything it starts is stopped when it returns.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := os.MkdirAll(cfg.WorkDir, 0o755); err != nil {
		return nil, fmt.Errorf("error creating %s: %w", cfg.WorkDir, err)
	}

	root := filepath.Join(cfg.WorkDir, "root")
	name := filepath.Base(cfg.File)

	size, err := copyFile(cfg.File, filepath.Join(root, name))
	if err != nil {
		return nil, err
	}

	anvil, anvilAddr, err := startProvider(ctx, cfg, root, name, size)
	if err != nil {
		return nil, err
	}

	defer anvil.Stop(5 * time.Second)

	atftpd, atftpdAddr, err := startAtftpd(ctx, cfg, root, name, size)
	if err != nil {
		return nil, err
	}

	defer atftpd.Stop(5 * time.Second)

	res := &Result{File: cfg.File, Size: size}

	type server struct {
		child *proc.Child
		addr  string
		out   *Server
	}

	for _, w := range cfg.Windows {
		c := Case{Window: w, Anvil: Server{Name: "anvil"}, Atftpd: Server{Name: "atftpd"}}
		servers := []server{{anvil, anvilAddr, &c.Anvil}, {atftpd, atftpdAddr, &c.Atftpd}}

		for round := range cfg.Rounds {
			// Alternate who goes first, so neither always runs on a warmer machine.
			order := servers
			if round%2 == 1 {
				order = []server{servers[1], servers[0]}
			}

			for _, s := range order {
				lr, cpu, err := trial(ctx, cfg, s.child, s.addr, name, size, w)
				if err != nil {
					return nil, fmt.Errorf("%s, windowsize %d: %w", s.out.Name, w, err)
				}

				s.out.Trials = append(s.out.Trials, lr)
				s.out.CPU = append(s.out.CPU, cpu)

				cfg.Log("tftp %s windowsize %d round %d: %.1f MB/s, %d transfers in %s, p50 %s p99 %s, %d re-ACKs, server CPU %s, client CPU %s",
					s.out.Name, w, round+1, lr.MBps(), lr.Transfers, lr.Elapsed.Round(time.Millisecond),
					lr.P50.Round(time.Millisecond), lr.P99.Round(time.Millisecond),
					lr.Reacks, cpu.Round(time.Millisecond), lr.ClientCPU.Round(time.Millisecond))
			}
		}

		res.Cases = append(res.Cases, c)
	}

	return res, nil
}

// trial runs the client once against one server, pinned, and measures the server's CPU.
func trial(ctx context.Context, cfg Config, server *proc.Child, addr, name string, size int64, window int) (LoadResult, time.Duration, error) {
	if exited, err := server.Exited(); exited {
		return LoadResult{}, 0, fmt.Errorf("%s exited: %v", server.Name(), err)
	}

	cpu0, err := proc.CPUTime(server.Pid())
	if err != nil {
		return LoadResult{}, 0, err
	}

	// A generous bound: a trial on this machine takes seconds.
	tctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()

	argv := proc.Pinned(cfg.ClientCPU, cfg.Self, "tftpload",
		"-addr", addr, "-file", name, "-size", strconv.FormatInt(size, 10),
		"-concurrency", strconv.Itoa(cfg.Concurrency), "-transfers", strconv.Itoa(cfg.Transfers),
		"-blksize", strconv.Itoa(cfg.BlockSize), "-windowsize", strconv.Itoa(window))

	out, err := exec.CommandContext(tctx, argv[0], argv[1:]...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return LoadResult{}, 0, fmt.Errorf("client failed: %w: %s", err, ee.Stderr)
		}

		return LoadResult{}, 0, fmt.Errorf("error running the client: %w", err)
	}

	cpu1, err := proc.CPUTime(server.Pid())
	if err != nil {
		return LoadResult{}, 0, err
	}

	var lr LoadResult
	if err := json.Unmarshal(out, &lr); err != nil {
		return LoadResult{}, 0, fmt.Errorf("error decoding the client's result %q: %w", out, err)
	}

	if lr.Failures > 0 {
		return lr, 0, fmt.Errorf("%d of %d transfers failed, first: %s", lr.Failures, lr.Transfers, lr.FirstErr)
	}

	if window > 0 && lr.WindowSize != window {
		return lr, 0, fmt.Errorf("asked for windowsize %d, got %d", window, lr.WindowSize)
	}

	return lr, cpu1 - cpu0, nil
}

// startProvider runs the provider with only TFTP facing the client (the ProxyDHCP off,
// its API on loopback) serving root.
func startProvider(ctx context.Context, cfg Config, root, name string, size int64) (*proc.Child, string, error) {
	state := filepath.Join(cfg.WorkDir, "state")
	if err := os.RemoveAll(state); err != nil {
		return nil, "", fmt.Errorf("error clearing %s: %w", state, err)
	}

	// Never served here; the provider wants agent assets to start.
	assets := filepath.Join(cfg.WorkDir, "agent")
	if err := httpbench.FakeAgentAssets(assets); err != nil {
		return nil, "", err
	}

	apiPort, err := freeport.TCP()
	if err != nil {
		return nil, "", fmt.Errorf("error choosing the provider's API port: %w", err)
	}

	tftpPort, err := freeport.UDP()
	if err != nil {
		return nil, "", fmt.Errorf("error choosing the provider's TFTP port: %w", err)
	}

	addr := "127.0.0.1:" + strconv.Itoa(tftpPort)
	logPath := filepath.Join(cfg.WorkDir, "anvil.log")

	argv := proc.Pinned(cfg.ServerCPU, cfg.ProviderBin,
		"--state-dir", state,
		"--api-listen-address", "127.0.0.1", "--api-advertise-address", "127.0.0.1",
		"--api-port", strconv.Itoa(apiPort),
		"--disable-dhcp-proxy", "--ui-listen-address", "",
		"--image-cache-size", "0",
		"--provision-bmc-credentials=false",
		"--agent-assets-dir", assets,
		"--tftp-listen-address", addr, "--tftp-root", root,
		"--ipxe-uefi-file", name,
		// Every client is one address here, and the per-address cap is not what is measured
		// (a finished transfer holds its slot until the server has read the last ACK, which
		// can come after the client's next request): as much room as atftpd's --maxthread.
		"--tftp-max-per-client", "1000",
	)

	return startServer(ctx, "anvil", argv, logPath, addr, name, size)
}

// startAtftpd runs atftpd in the foreground as our child, threads as it likes, windowsize
// allowed, serving root.
func startAtftpd(ctx context.Context, cfg Config, root, name string, size int64) (*proc.Child, string, error) {
	port, err := freeport.UDP()
	if err != nil {
		return nil, "", fmt.Errorf("error choosing atftpd's port: %w", err)
	}

	// atftpd drops privileges to --user; stay who we are, who owns root.
	u, err := user.Current()
	if err != nil {
		return nil, "", fmt.Errorf("error finding the current user: %w", err)
	}

	g, err := user.LookupGroupId(u.Gid)
	if err != nil {
		return nil, "", fmt.Errorf("error finding the current group: %w", err)
	}

	addr := "127.0.0.1:" + strconv.Itoa(port)
	logPath := filepath.Join(cfg.WorkDir, "atftpd.log")

	argv := proc.Pinned(cfg.ServerCPU, "atftpd",
		"--daemon", "--no-fork", "--logfile", "-",
		"--port", strconv.Itoa(port), "--bind-address", "127.0.0.1",
		"--user", u.Username, "--group", g.Name,
		"--maxthread", "1000", "--no-multicast",
		root)

	return startServer(ctx, "atftpd", argv, logPath, addr, name, size)
}

// startServer runs argv as our child, logging to logPath, and waits until it serves the
// whole file name over TFTP at addr.
func startServer(ctx context.Context, what string, argv []string, logPath, addr, name string, size int64) (*proc.Child, string, error) {
	p, err := proc.Start(what, exec.Command(argv[0], argv[1:]...), logPath)
	if err != nil {
		return nil, "", err
	}

	if err := waitTFTP(ctx, p, addr, name, size); err != nil {
		p.Stop(2 * time.Second)

		return nil, "", fmt.Errorf("%w (log: %s)", err, logPath)
	}

	return p, addr, nil
}

// waitTFTP waits until the server sends the whole file.
func waitTFTP(ctx context.Context, p *proc.Child, addr, name string, size int64) error {
	deadline := time.Now().Add(60 * time.Second)

	for {
		if exited, err := p.Exited(); exited {
			return fmt.Errorf("%s exited before serving TFTP on %s: %v", p.Name(), addr, err)
		}

		var w countingWriter

		_, err := tftp.Get(ctx, addr, name, tftp.ClientOptions{BlockSize: 1468, Timeout: 500 * time.Millisecond, Retries: 1}, &w)
		if err == nil && w.n == size {
			return nil
		}

		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s did not serve %s over TFTP on %s: %v", p.Name(), name, addr, err)
		}

		time.Sleep(200 * time.Millisecond)
	}
}

func copyFile(src, dst string) (int64, error) {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return 0, fmt.Errorf("error creating %s: %w", filepath.Dir(dst), err)
	}

	in, err := os.Open(src)
	if err != nil {
		return 0, fmt.Errorf("error opening the served file: %w", err)
	}

	defer in.Close()

	out, err := os.Create(dst)
	if err != nil {
		return 0, fmt.Errorf("error creating %s: %w", dst, err)
	}

	n, err := io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}

	if err != nil {
		return 0, fmt.Errorf("error copying %s to %s: %w", src, dst, err)
	}

	return n, nil
}
