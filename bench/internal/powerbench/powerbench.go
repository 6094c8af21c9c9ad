// Package powerbench measures power.Sweep with the IPMI backend over a fleet of go-ipmi
// BMC servers running in this process, each on its own loopback UDP port: all at the
// sweep's default concurrency against one BMC after another, as the established
// provider polls. The sweep runs in ipmi-sweep (provider/internal/power/ipmi/cmd), a
// separate process, because the power packages are internal to the provider.
package powerbench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"time"
)

// defaultConcurrency mirrors power.DefaultConcurrency (ipmi-sweep applies it to 0).
const defaultConcurrency = 64

// Config of a run.
type Config struct {
	SweepBin    string        // ipmi-sweep binary
	BMCs        int           // simulated BMCs (each its own loopback UDP port)
	Serial      int           // BMCs the serial sweep polls (<= BMCs); its time is extrapolated to BMCs
	Concurrency int           // the concurrent sweep's limit (0: power.DefaultConcurrency)
	Timeout     time.Duration // per BMC (0: power.DefaultTimeout)
	Limit       time.Duration // the whole run
	Log         func(format string, args ...any)
}

// Sweep is one timed sweep.
type Sweep struct {
	BMCs        int
	Concurrency int
	Took        time.Duration
	Failed      int           // observations with an error or a wrong state
	FirstErr    error         // the first of them
	P50, Max    time.Duration // per BMC
}

// PerSecond is BMCs polled per second.
func (s Sweep) PerSecond() float64 { return float64(s.BMCs) / s.Took.Seconds() }

// Result of a run.
type Result struct {
	BMCs       int
	Concurrent Sweep
	Serial     Sweep
	// SerialFull is the serial sweep's time for all BMCs: measured when Serial.BMCs ==
	// BMCs, else extrapolated from the subset.
	SerialFull   time.Duration
	Extrapolated bool
}

// Run starts the fleet, sweeps it both ways and stops it.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if cfg.BMCs <= 0 || cfg.Serial <= 0 || cfg.Serial > cfg.BMCs {
		return nil, fmt.Errorf("want 0 < serial (%d) <= BMCs (%d)", cfg.Serial, cfg.BMCs)
	}

	if cfg.Concurrency == 0 {
		cfg.Concurrency = defaultConcurrency
	}

	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}

	ctx, cancel := context.WithTimeout(ctx, cfg.Limit)
	defer cancel()

	cfg.Log("power: starting %d go-ipmi BMCs on loopback", cfg.BMCs)

	f, err := startFleet(ctx, cfg.BMCs)
	if err != nil {
		return nil, err
	}

	res, err := sweepBoth(ctx, cfg, f)

	if stopErr := f.stop(); stopErr != nil {
		err = errors.Join(err, fmt.Errorf("a simulated BMC failed: %w", stopErr))
	}

	return res, err
}

func sweepBoth(ctx context.Context, cfg Config, f *fleet) (*Result, error) {
	targets := make([]target, cfg.BMCs)
	for i, port := range f.ports {
		targets[i] = target{ID: "bmc-" + strconv.Itoa(i), Address: "127.0.0.1", Port: port, Username: bmcUser, Password: bmcPassword}
	}

	res := &Result{BMCs: cfg.BMCs}

	var err error

	cfg.Log("power: sweeping %d BMCs, %d at a time", cfg.BMCs, cfg.Concurrency)

	if res.Concurrent, err = timeSweep(ctx, cfg, targets, cfg.Concurrency, f); err != nil {
		return nil, err
	}

	cfg.Log("power: sweeping %d BMCs one after another", cfg.Serial)

	if res.Serial, err = timeSweep(ctx, cfg, targets[:cfg.Serial], 1, f); err != nil {
		return nil, err
	}

	res.SerialFull = res.Serial.Took * time.Duration(cfg.BMCs) / time.Duration(cfg.Serial)
	res.Extrapolated = cfg.Serial < cfg.BMCs

	for _, s := range []Sweep{res.Concurrent, res.Serial} {
		if s.Failed > 0 {
			return res, fmt.Errorf("%d of %d BMCs (concurrency %d) not read correctly, first: %w", s.Failed, s.BMCs, s.Concurrency, s.FirstErr)
		}
	}

	return res, nil
}

// The JSON ipmi-sweep reads and writes.
type (
	target struct {
		ID       string `json:"id"`
		Address  string `json:"address"`
		Port     int    `json:"port"`
		Username string `json:"username"`
		Password string `json:"password"`
	}
	request struct {
		Concurrency int      `json:"concurrency"`
		Timeout     string   `json:"timeout"`
		Targets     []target `json:"targets"`
	}
	response struct {
		TookNS       time.Duration `json:"took_ns"`
		Observations []struct {
			ID     string        `json:"id"`
			State  string        `json:"state"`
			Err    string        `json:"err"`
			TookNS time.Duration `json:"took_ns"`
		} `json:"observations"`
	}
)

// timeSweep runs one sweep in ipmi-sweep and checks every state against the simulated
// chassis. The time is the sweep's own (process start and JSON are not in it).
func timeSweep(ctx context.Context, cfg Config, targets []target, concurrency int, f *fleet) (Sweep, error) {
	in, err := json.Marshal(request{Concurrency: concurrency, Timeout: cfg.Timeout.String(), Targets: targets})
	if err != nil {
		return Sweep{}, fmt.Errorf("error encoding the sweep request: %w", err)
	}

	var out, stderr bytes.Buffer

	cmd := exec.CommandContext(ctx, cfg.SweepBin)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(in), &out, &stderr

	if err = cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return Sweep{}, fmt.Errorf("power benchmark stopped (limit %s): %w", cfg.Limit, ctx.Err())
		}

		return Sweep{}, fmt.Errorf("ipmi-sweep: %w: %s", err, stderr.String())
	}

	var res response
	if err = json.Unmarshal(out.Bytes(), &res); err != nil {
		return Sweep{}, fmt.Errorf("error decoding ipmi-sweep's answer: %w", err)
	}

	if len(res.Observations) != len(targets) {
		return Sweep{}, fmt.Errorf("ipmi-sweep answered %d observations for %d BMCs", len(res.Observations), len(targets))
	}

	s := Sweep{BMCs: len(targets), Concurrency: concurrency, Took: res.TookNS}
	took := make([]time.Duration, len(targets))

	for i, o := range res.Observations {
		took[i] = o.TookNS

		want := "off"
		if on, _ := f.chassis[i].PowerState(ctx); on {
			want = "on"
		}

		var bad error

		switch {
		case o.ID != targets[i].ID:
			bad = fmt.Errorf("observation %d is of %s, want %s", i, o.ID, targets[i].ID)
		case o.Err != "":
			bad = errors.New(o.ID + ": " + o.Err)
		case o.State != want:
			bad = fmt.Errorf("%s: read %q, the chassis is %q", o.ID, o.State, want)
		}

		if bad != nil {
			if s.Failed == 0 {
				s.FirstErr = bad
			}

			s.Failed++
		}
	}

	slices.Sort(took)
	s.P50, s.Max = took[len(took)/2], took[len(took)-1]

	return s, nil
}
