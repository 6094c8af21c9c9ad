// Package wipebench measures the agent's disk wipe (agent/internal/wipe through the
// wipe-disk command, as the wipe package is internal to the agent) on loop devices over
// sparse files: a fast wipe of 1 TiB against 10 GiB (it should not grow with the disk)
// and a zero wipe against dd writing zeroes to the same device.
package wipebench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Config of a run.
type Config struct {
	WipeBin  string // wipe-disk (go build -o _out/bin/wipe-disk ./agent/internal/wipe/cmd/wipe-disk)
	WorkDir  string // where the sparse files live (a filesystem holding sparse files)
	ZeroSize int64  // size of the zero wipe's device
	Rounds   int    // runs of each measurement (median counts)
	Log      func(format string, args ...any)
}

// Result of a run; durations are medians.
type Result struct {
	FastSmall, FastLarge   time.Duration
	SmallSize, LargeSize   int64
	ZeroSize               int64
	Zero, DD, DDSync       time.Duration
	ZeroRounds, DDRounds   []time.Duration
	DDSyncRounds           []time.Duration
	FastMethod, ZeroMethod string
}

// ZeroMBps and DDMBps are the throughputs of the zero wipe and of dd.
func (r *Result) ZeroMBps() float64 { return float64(r.ZeroSize) / 1e6 / r.Zero.Seconds() }

// DDMBps is dd's throughput on the same device.
func (r *Result) DDMBps() float64 { return float64(r.ZeroSize) / 1e6 / r.DD.Seconds() }

// DDSyncMBps is dd's throughput when it also syncs at the end (conv=fsync), as a wipe does.
func (r *Result) DDSyncMBps() float64 { return float64(r.ZeroSize) / 1e6 / r.DDSync.Seconds() }

// Run sets up the loop devices, measures and detaches them again.
func Run(ctx context.Context, cfg Config) (res *Result, err error) {
	for _, tool := range []string{"losetup", "dd"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("%s is missing: %w", tool, err)
		}
	}

	if err = os.MkdirAll(cfg.WorkDir, 0o755); err != nil {
		return nil, fmt.Errorf("error creating %s: %w", cfg.WorkDir, err)
	}

	dir, err := os.MkdirTemp(cfg.WorkDir, "wipe")
	if err != nil {
		return nil, fmt.Errorf("error creating a work directory: %w", err)
	}

	var devs []string

	defer func() {
		for _, d := range devs {
			if out, derr := exec.Command("losetup", "--detach", d).CombinedOutput(); derr != nil {
				err = errors.Join(err, fmt.Errorf("error detaching %s: %w: %s", d, derr, out))
			}
		}

		if rerr := os.RemoveAll(dir); rerr != nil {
			err = errors.Join(err, fmt.Errorf("error removing %s: %w", dir, rerr))
		}
	}()

	attach := func(name string, size int64) (string, error) {
		file := filepath.Join(dir, name)
		if err := os.WriteFile(file, nil, 0o600); err != nil {
			return "", fmt.Errorf("error creating %s: %w", file, err)
		}

		if err := os.Truncate(file, size); err != nil {
			return "", fmt.Errorf("error sizing %s: %w", file, err)
		}

		// Direct I/O from the loop device to its file: a disk has no host page cache in
		// front of it, and without this dd's "direct" writes stop in that cache while
		// the wipe's sync pushes them out — two different promises.
		out, err := exec.CommandContext(ctx, "losetup", "--find", "--show", "--direct-io=on", file).CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("error attaching %s: %w: %s", file, err, out)
		}

		dev := strings.TrimSpace(string(out))
		devs = append(devs, dev)

		return dev, nil
	}

	res = &Result{SmallSize: 10 << 30, LargeSize: 1 << 40, ZeroSize: cfg.ZeroSize}

	for _, d := range []struct {
		size int64
		into *time.Duration
	}{{res.SmallSize, &res.FastSmall}, {res.LargeSize, &res.FastLarge}} {
		dev, err := attach(fmt.Sprintf("fast-%d.img", d.size>>30), d.size)
		if err != nil {
			return nil, err
		}

		cfg.Log("wipe: fast wipe of %d GiB on %s, %d rounds", d.size>>30, dev, cfg.Rounds)

		var rounds []time.Duration

		for range cfg.Rounds {
			took, method, err := wipeOnce(ctx, cfg.WipeBin, "fast", dev)
			if err != nil {
				return nil, err
			}

			rounds, res.FastMethod = append(rounds, took), method
		}

		*d.into = median(rounds)
	}

	dev, err := attach("zero.img", cfg.ZeroSize)
	if err != nil {
		return nil, err
	}

	cfg.Log("wipe: zero wipe against dd on %d MiB (%s), %d rounds each", cfg.ZeroSize>>20, dev, cfg.Rounds)

	for range cfg.Rounds {
		took, method, err := wipeOnce(ctx, cfg.WipeBin, "zeroes", dev)
		if err != nil {
			return nil, err
		}

		res.ZeroRounds, res.ZeroMethod = append(res.ZeroRounds, took), method

		for _, dd := range []struct {
			args   []string
			rounds *[]time.Duration
		}{
			{[]string{"if=/dev/zero", "of=" + dev, "bs=4M", "oflag=direct"}, &res.DDRounds},
			{[]string{"if=/dev/zero", "of=" + dev, "bs=4M", "oflag=direct", "conv=fsync"}, &res.DDSyncRounds},
		} {
			start := time.Now()

			out, err := exec.CommandContext(ctx, "dd", dd.args...).CombinedOutput()
			// dd ends with "No space left on device" at the end of the device: that is done.
			if err != nil && !bytes.Contains(out, []byte("No space left")) {
				return nil, fmt.Errorf("dd: %w: %s", err, out)
			}

			*dd.rounds = append(*dd.rounds, time.Since(start))
		}
	}

	res.Zero, res.DD, res.DDSync = median(res.ZeroRounds), median(res.DDRounds), median(res.DDSyncRounds)

	return res, nil
}

// wipeOnce runs wipe-disk and returns the wipe's own duration (opening, wiping, syncing
// and verifying; not the process start) and method.
func wipeOnce(ctx context.Context, bin, mode, dev string) (time.Duration, string, error) {
	out, err := exec.CommandContext(ctx, bin, "-mode", mode, dev).CombinedOutput()
	if err != nil {
		return 0, "", fmt.Errorf("wipe-disk -mode %s %s: %w: %s", mode, dev, err, out)
	}

	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "WIPE-REPORT "); ok {
			var r struct {
				Method   string
				Duration time.Duration
			}

			if err := json.Unmarshal([]byte(rest), &r); err != nil {
				return 0, "", fmt.Errorf("error reading the wipe report %q: %w", rest, err)
			}

			return r.Duration, r.Method, nil
		}
	}

	return 0, "", fmt.Errorf("wipe-disk -mode %s %s printed no report: %s", mode, dev, out)
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)

	return s[len(s)/2]
}
