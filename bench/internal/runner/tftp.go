package runner

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/anvil-metal/anvil/bench/internal/report"
	"github.com/anvil-metal/anvil/bench/internal/tftpbench"
)

// tftpOptions are the flags of the TFTP benchmark.
type tftpOptions struct {
	file                           *string
	concurrency, transfers, rounds *int
	blockSize                      *int
	windows                        *string
}

func tftpFlags(fs *flag.FlagSet) tftpOptions {
	return tftpOptions{
		file:        fs.String("tftp-file", "/usr/lib/ipxe/ipxe.efi", "iPXE binary the TFTP benchmark fetches"),
		concurrency: fs.Int("tftp-concurrency", 10, "concurrent TFTP transfers"),
		transfers:   fs.Int("tftp-transfers", 10, "transfers per client per TFTP trial"),
		rounds:      fs.Int("tftp-rounds", 5, "TFTP trials per server and window size, alternating (median counts)"),
		blockSize:   fs.Int("tftp-blksize", 1468, "blksize the TFTP clients ask for"),
		windows: fs.String("tftp-windows", "0,4,16",
			"windowsizes (RFC 7440) measured, comma-separated; 0 asks for none, as BIOS PXE ROMs; UEFI firmware asks for one"),
	}
}

func runTFTP(ctx context.Context, rep *report.Report, o tftpOptions, providerBin, self, out string, serverCPU, clientCPU int, logf func(string, ...any)) error {
	var windows []int

	for w := range strings.SplitSeq(*o.windows, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(w))
		if err != nil || n < 0 || n > 65535 {
			return fmt.Errorf("invalid -tftp-windows entry %q", w)
		}

		windows = append(windows, n)
	}

	res, err := tftpbench.Run(ctx, tftpbench.Config{
		ProviderBin: providerBin, Self: self,
		WorkDir:     filepath.Join(out, "tftp"),
		File:        *o.file,
		Concurrency: *o.concurrency, Transfers: *o.transfers, Rounds: max(*o.rounds, 1),
		BlockSize: *o.blockSize, Windows: windows,
		ServerCPU: serverCPU, ClientCPU: clientCPU,
		Log: logf,
	})
	if err != nil {
		return fmt.Errorf("tftp benchmark: %w", err)
	}

	name := filepath.Base(res.File)

	for _, c := range res.Cases {
		win := "no windowsize (BIOS PXE ROMs)"
		if c.Window > 0 {
			win = fmt.Sprintf("windowsize %d", c.Window)
		}

		a, p := c.Anvil.Median(), c.Atftpd.Median()

		rep.Add(report.Row{
			Name: fmt.Sprintf("TFTP %s (%d KB), %d concurrent, blksize %d, %s", name, res.Size/1000, *o.concurrency, *o.blockSize, win),
			Unit: "MB/s", Anvil: a.MBps(), Peer: p.MBps(), PeerName: "atftpd",
			Goal: report.RatioAtLeast, Target: 1.0,
		})
		rep.Add(report.Row{
			Name: fmt.Sprintf("TFTP server CPU per MB sent, %s", win), Unit: "ms",
			Anvil: c.Anvil.CPUPerMB(), Peer: c.Atftpd.CPUPerMB(), PeerName: "atftpd",
			Goal: report.Info,
		})

		// Each round runs both servers back to back: its ratio is the least disturbed by
		// load from outside the benchmark, which drifts over seconds.
		var paired []float64

		for i := range min(len(c.Anvil.Trials), len(c.Atftpd.Trials)) {
			if p := c.Atftpd.Trials[i].MBps(); p > 0 {
				paired = append(paired, c.Anvil.Trials[i].MBps()/p)
			}
		}

		if len(paired) > 0 {
			var txt []string
			for _, r := range paired {
				txt = append(txt, fmt.Sprintf("%.2fx", r))
			}

			sorted := slices.Sorted(slices.Values(paired))
			rep.Notef("tftp %s: anvil/atftpd per round %s; median %.2fx", win, strings.Join(txt, ", "), sorted[len(sorted)/2])
		}

		for _, s := range []tftpbench.Server{c.Anvil, c.Atftpd} {
			var rounds []string
			for _, t := range s.Trials {
				rounds = append(rounds, fmt.Sprintf("%.1f", t.MBps()))
			}

			m := s.Median()
			rep.Notef("tftp %s %s: MB/s per round %s; median round %d transfers, per transfer p50 %s p99 %s max %s, %d client re-ACKs",
				s.Name, win, strings.Join(rounds, ", "), m.Transfers,
				m.P50.Round(time.Millisecond), m.P99.Round(time.Millisecond), m.Max.Round(time.Millisecond), m.Reacks)
		}
	}

	rep.Notef("tftp: the provider's TFTP and atftpd (threads, windowsize enabled) on loopback, pinned to the server CPU; one client (bench tftpload, RFC 7440-capable) pinned to the client CPU, the same options for both; %d clients x %d transfers per trial",
		*o.concurrency, *o.transfers)

	return nil
}
