package tftpbench

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/anvil-metal/anvil/internal/tftp"
)

// LoadConfig is one trial: Concurrency clients each fetching File Transfers times back
// to back, all with the same options.
type LoadConfig struct {
	Addr        string
	File        string
	Size        int64 // the file's size: a transfer of any other length fails
	Concurrency int
	Transfers   int // per client
	BlockSize   int
	WindowSize  int // 0: not asked (lock step)
	Timeout     time.Duration
}

// LoadResult is what a trial measured.
type LoadResult struct {
	Transfers int           `json:"transfers"`
	Failures  int           `json:"failures"`
	FirstErr  string        `json:"first_err,omitempty"`
	Bytes     int64         `json:"bytes"`
	Elapsed   time.Duration `json:"elapsed"`
	P50       time.Duration `json:"p50"`
	P99       time.Duration `json:"p99"`
	Max       time.Duration `json:"max"`
	// Reacks is ACKs the clients sent again: losses, duplicates or timeouts seen.
	Reacks uint64 `json:"reacks"`
	// WindowSize is what the server agreed to: 1 without windows.
	WindowSize int `json:"window_size"`
	// ClientCPU is the client process's CPU time in the trial: near Elapsed, the client
	// is what limits it.
	ClientCPU time.Duration `json:"client_cpu"`
}

// MBps is the trial's throughput in MB/s.
func (r LoadResult) MBps() float64 {
	if r.Elapsed <= 0 {
		return 0
	}

	return float64(r.Bytes) / 1e6 / r.Elapsed.Seconds()
}

// countingWriter counts what a transfer received, keeping nothing.
type countingWriter struct{ n int64 }

func (w *countingWriter) Write(b []byte) (int, error) {
	w.n += int64(len(b))

	return len(b), nil
}

var _ io.Writer = (*countingWriter)(nil)

// Load runs one trial. Every transfer is bounded by the client's timeouts and retries,
// and the trial by ctx.
func Load(ctx context.Context, cfg LoadConfig) (LoadResult, error) {
	if cfg.Concurrency <= 0 || cfg.Transfers <= 0 {
		return LoadResult{}, errors.New("concurrency and transfers must be positive")
	}

	opts := tftp.ClientOptions{BlockSize: cfg.BlockSize, WindowSize: cfg.WindowSize, Timeout: cfg.Timeout, Retries: 5}

	var (
		mu    sync.Mutex
		res   LoadResult
		times = make([]time.Duration, 0, cfg.Concurrency*cfg.Transfers)
		wg    sync.WaitGroup
	)

	cpu0 := selfCPU()
	start := time.Now()

	for range cfg.Concurrency {
		wg.Go(func() {
			for range cfg.Transfers {
				if ctx.Err() != nil {
					return
				}

				var w countingWriter

				t0 := time.Now()
				got, err := tftp.Get(ctx, cfg.Addr, cfg.File, opts, &w)
				took := time.Since(t0)

				if err == nil && w.n != cfg.Size {
					err = fmt.Errorf("received %d bytes of %d", w.n, cfg.Size)
				}

				mu.Lock()
				res.Transfers++
				res.Reacks += got.Reacks
				res.WindowSize = max(res.WindowSize, got.WindowSize)

				if err != nil {
					res.Failures++
					if res.FirstErr == "" {
						res.FirstErr = err.Error()
					}
				} else {
					res.Bytes += w.n
					times = append(times, took)
				}
				mu.Unlock()
			}
		})
	}

	wg.Wait()

	res.Elapsed = time.Since(start)
	res.ClientCPU = selfCPU() - cpu0

	if ctx.Err() != nil {
		return res, fmt.Errorf("trial interrupted: %w", ctx.Err())
	}

	if len(times) > 0 {
		slices.Sort(times)
		res.P50 = times[len(times)/2]
		res.P99 = times[min(len(times)-1, len(times)*99/100)]
		res.Max = times[len(times)-1]
	}

	return res, nil
}

// selfCPU is this process's CPU time so far (user and system), 0 if unknown.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}

	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// LoadMain is the bench's hidden "tftpload" subcommand: one trial, its result as JSON on
// stdout.
func LoadMain(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("tftpload", flag.ContinueOnError)

	var cfg LoadConfig

	fs.StringVar(&cfg.Addr, "addr", "", "TFTP server host:port")
	fs.StringVar(&cfg.File, "file", "", "file to fetch")
	fs.Int64Var(&cfg.Size, "size", 0, "the file's size")
	fs.IntVar(&cfg.Concurrency, "concurrency", 10, "clients")
	fs.IntVar(&cfg.Transfers, "transfers", 10, "transfers per client")
	fs.IntVar(&cfg.BlockSize, "blksize", 1468, "blksize asked for")
	fs.IntVar(&cfg.WindowSize, "windowsize", 0, "windowsize asked for (0: none)")
	fs.DurationVar(&cfg.Timeout, "timeout", time.Second, "client retransmission timeout")

	if err := fs.Parse(args); err != nil {
		return err
	}

	res, err := Load(ctx, cfg)
	if err != nil {
		return err
	}

	b, err := json.Marshal(res)
	if err != nil {
		return fmt.Errorf("error encoding the result: %w", err)
	}

	fmt.Println(string(b))

	return nil
}
