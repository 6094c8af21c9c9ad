package fleetbench

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"gopkg.in/yaml.v3"

	controlv1 "github.com/anvil-metal/anvil/api/control/v1"
	"github.com/anvil-metal/anvil/bench/internal/httpbench"
)

// The power controller's timing as the bench runs it (provider/internal/controllers,
// power_record.go): every BMC is read each pollInterval (given as the provider's
// --power-poll-interval, its default), and a BMC that reads as stored costs one
// PowerStatus write each observedRefresh.
const (
	pollInterval    = 30 * time.Second
	observedRefresh = 10 * time.Minute
)

const powerStatusType = "PowerStatuses.anvil.dev"

// accepted are the machines accepted and wiped, by index.
func (r *run) accepted() []string {
	var ms []*simMachine

	r.ev.view(func(all map[string]*simMachine) {
		for _, m := range all {
			if len(m.Wiped) > 0 {
				ms = append(ms, m)
			}
		}
	})

	slices.SortFunc(ms, func(a, b *simMachine) int { return a.Index - b.Index })

	out := make([]string, 0, len(ms))
	for _, m := range ms {
		out = append(out, m.ID)
	}

	return out
}

// setBMC gives machine id the simulator's power API as its BMC.
func (r *run) setBMC(ctx context.Context, ctl *httpbench.Control, id string) error {
	if _, err := ctl.Transitions().SetBMC(ctx, &controlv1.SetBMCRequest{MachineId: id, Kind: "api", Address: "http://" + r.simAddr}); err != nil {
		return fmt.Errorf("error giving %s its BMC: %w", id, err)
	}

	return nil
}

// giveBMCs gives each machine its BMC, 8 at a time, and waits (bounded by the phase)
// until the power controller has read each once: a PowerStatus with the power read.
func (r *run) giveBMCs(ctx context.Context, ctl *httpbench.Control, ids []string) error {
	r.logf("giving %d machines a BMC (the simulator's power API)", len(ids))

	var given atomic.Int64

	if _, err := r.transition(ctx, ids, nil, func(ctx context.Context, id string) error {
		if n := given.Add(1); n%1000 == 0 {
			r.logf("BMCs given: %d/%d", n, len(ids))
		}

		return r.setBMC(ctx, ctl, id)
	}); err != nil {
		return err
	}

	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}

	deadline := time.Now().Add(r.cfg.Phase)

	for {
		read := 0

		err := ctl.List(ctx, powerStatusType, func(id, spec string) error {
			var ps struct {
				State string `yaml:"state"`
			}

			if err := yaml.Unmarshal([]byte(spec), &ps); err != nil {
				return fmt.Errorf("error reading the power status of %s: %w", id, err)
			}

			if want[id] && (ps.State == "on" || ps.State == "off") {
				read++
			}

			return nil
		})
		if err == nil && read == len(ids) {
			r.logf("every BMC read once")

			return nil
		}

		if exited, perr := r.provider.Exited(); exited {
			return fmt.Errorf("the provider exited while waiting for the first BMC reads (%d/%d): %v", read, len(ids), perr)
		}

		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("first BMC reads: %d/%d after %s (last error: %v)", read, len(ids), r.cfg.Phase, err)
		}

		r.logf("waiting for the first BMC reads: %d/%d", read, len(ids))

		if err := r.idle(ctx, 10*time.Second); err != nil {
			return err
		}
	}
}

// idle lets d pass, sampling the provider each second; it fails should the provider exit.
func (r *run) idle(ctx context.Context, d time.Duration) error {
	end := time.Now().Add(d)

	for {
		r.sampleProvider(false)

		if exited, err := r.provider.Exited(); exited {
			return fmt.Errorf("the provider exited: %v", err)
		}

		left := time.Until(end)
		if left <= 0 {
			return nil
		}

		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(min(left, time.Second)):
		}
	}
}

// steady lets the fleet settle for one poll interval after the scenario (the restarted
// provider has read every BMC), then measures a window of cfg.Steady at rest.
func (r *run) steady(ctx context.Context) error {
	r.logf("settling for one BMC poll interval (%s)", pollInterval)

	if err := r.idle(ctx, pollInterval+5*time.Second); err != nil {
		return err
	}

	r.meter.mark(ctx, "settle (a poll interval)", r.cfg.Machines)
	r.logf("steady state: measuring %s", r.cfg.Steady)

	if err := r.idle(ctx, r.cfg.Steady); err != nil {
		return err
	}

	r.meter.mark(ctx, PhaseSteady, r.cfg.Machines)

	return nil
}
