// Package fleetbench is the fleet benchmark: a provider on loopback with a fresh state,
// and the fleet simulator's N machines (agent/cmd/fleetsim, real agent sessions) against
// it: all register and are auto-accepted and wiped; some are allocated, installed and
// deallocated (the reset wipe), the provider SIGKILLed in the middle of the reset wipes
// and restarted on the same state. It measures registrations, order latency, the
// provider's CPU, memory and state size and how long the sessions take to come back, and
// checks nothing was lost.
//
// The state is the embedded store or, as a replica of a site, a 3-member etcd cluster on
// loopback; then the run also reads etcd at each phase's boundaries (revision, counters,
// every key written by resource type) and optionally gives every machine a BMC and
// measures a window at rest: what the state costs etcd, and its history against the quota.
package fleetbench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	controlv1 "github.com/anvil-metal/anvil/api/control/v1"
	"github.com/anvil-metal/anvil/bench/internal/httpbench"
	"github.com/anvil-metal/anvil/internal/freeport"
	"github.com/anvil-metal/anvil/internal/proc"
)

// Config configures the benchmark.
type Config struct {
	ProviderBin, FleetsimBin string
	// WorkDir holds the logs, the event stream and the provider's state (fresh each run).
	WorkDir string
	// Machines simulated; Allocate of them allocated, installed and deallocated.
	Machines, Allocate int
	// WipeFast is the simulated fast wipe; the reset wipes are still running when the
	// provider is killed.
	WipeFast time.Duration
	// Phase bounds each phase (registration, the wipes, the allocations, …).
	Phase time.Duration
	// TalosVersion of the allocations.
	TalosVersion string
	// SMBIOSDir is the fleet simulator's -smbios-dir ("" for its default).
	SMBIOSDir string
	// MemoryLimit is the provider's --memory-limit ("" for its default).
	MemoryLimit string
	// State is where the provider keeps its state: StateBolt ("" too) or StateEtcd, a
	// 3-member etcd cluster on loopback (TLS) in WorkDir, the provider its one replica.
	State string
	// EtcdBin is the etcd binary (etcdtest's default when empty).
	EtcdBin string
	// BMCs of the accepted machines (the first by index) are given an api BMC at the
	// simulator before the allocations, so the power controller polls them; 0 gives one
	// only to the allocated machines, as they are allocated.
	BMCs int
	// Steady, when set, is a window measured at rest once the scenario is over and a
	// poll interval has passed.
	Steady time.Duration
	Log    func(format string, args ...any)
}

// Memory is a reading of the provider's memory: resident, and its Go runtime's figures
// (its /metrics).
type Memory struct {
	RSS, HeapInuse, StackInuse, NextGC int64
	Goroutines                         int
}

// Latency is a distribution of delays.
type Latency struct {
	N             int
	P50, P99, Max time.Duration
}

func latencyOf(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}

	slices.Sort(ds)

	at := func(q float64) time.Duration { return ds[min(len(ds)-1, int(q*float64(len(ds))))] }

	return Latency{N: len(ds), P50: at(0.50), P99: at(0.99), Max: ds[len(ds)-1]}
}

// Result is what the benchmark measured.
type Result struct {
	Machines, Allocated int
	// RegisterTook is from the simulator's start to every machine's first Welcome.
	RegisterTook time.Duration
	// AcceptWipeTook is from the simulator's start to every machine's first wipe done
	// (auto-accepted once its inventory is in).
	AcceptWipeTook time.Duration
	// AllocOrder is from an Allocate call to the agent receiving the order it causes;
	// DeallocWipe from a Deallocate call of an installed machine to its agent receiving
	// the reset wipe (a power cycle through the power API and a PXE boot in between).
	AllocOrder, DeallocWipe Latency
	// CPU is the provider's CPU time (both lives); PeakRSS the larger VmHWM.
	CPU        time.Duration
	PeakRSS    int64
	StateBytes int64
	// AtPeak is what the provider's Go runtime said about its memory when its resident
	// memory was largest: where the peak went.
	AtPeak Memory
	// SessionsAtKill were up when the provider was killed; RestartBack is from the
	// restart until each had registered again.
	SessionsAtKill int
	RestartBack    time.Duration
	// What was lost: machines unknown or no longer accepted after the restart, erase
	// reports missing or wrong, wipes carried out twice, owed reset wipes never sent.
	Lost, ReportsLost, WipesTwice, NotResent int
	// NotAccepted were never auto-accepted and wiped within the phase.
	NotAccepted int
	// State is where the provider kept its state; BMCs how many machines had a BMC the
	// power controller polled.
	State string
	BMCs  int
	// Phases are the scenario's parts and what each cost the state.
	Phases []Phase
	// StateFile is the embedded store's file (state.db) at the end.
	StateFile int64
	// Etcd is what the etcd cluster says of the run (nil on bbolt).
	Etcd     *EtcdResult
	Problems []string
}

func (r *Result) problem(format string, args ...any) {
	if len(r.Problems) < 20 {
		r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
	}
}

// run is one benchmark run's processes and what they said.
type run struct {
	cfg      Config
	args     []string
	port     int
	stateDir string
	provider *proc.Child
	lives    int
	res      *Result
	ev       *fleetEvents
	simAddr  string
	meter    *meter
	// lifeCPU is the running provider's CPU time as last read.
	lifeCPU time.Duration
}

// Run runs the benchmark. Every process it starts is stopped before it returns.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := os.RemoveAll(cfg.WorkDir); err != nil {
		return nil, fmt.Errorf("error clearing %s: %w", cfg.WorkDir, err)
	}

	if err := os.MkdirAll(cfg.WorkDir, 0o755); err != nil {
		return nil, fmt.Errorf("error creating %s: %w", cfg.WorkDir, err)
	}

	factory, err := httpbench.StartFactory()
	if err != nil {
		return nil, err
	}
	defer factory.Close()

	if cfg.State == "" {
		cfg.State = StateBolt
	}

	if cfg.State != StateBolt && cfg.State != StateEtcd {
		return nil, fmt.Errorf("state %q: want %s or %s", cfg.State, StateBolt, StateEtcd)
	}

	r := &run{cfg: cfg, res: &Result{Machines: cfg.Machines, Allocated: cfg.Allocate, State: cfg.State}, ev: newFleetEvents(),
		stateDir: filepath.Join(cfg.WorkDir, "state")}
	r.meter = &meter{file: filepath.Join(r.stateDir, "state.db")}

	if r.port, err = freeport.TCP(); err != nil {
		return nil, err
	}

	assets := filepath.Join(cfg.WorkDir, "agent")
	if err = httpbench.FakeAgentAssets(assets); err != nil {
		return nil, err
	}

	r.args = []string{
		"--state-dir", r.stateDir,
		"--api-listen-address", "127.0.0.1", "--api-advertise-address", "127.0.0.1", "--api-port", strconv.Itoa(r.port),
		"--disable-dhcp-proxy", "--disable-tftp", "--ui-listen-address", "", "--image-cache-size", "0",
		"--agent-assets-dir", assets, "--image-factory-base-url", factory.URL,
		// The provider fetches a schematic's cmdline from it for a Talos boot script; the
		// simulated machines never fetch the kernel.
		"--image-factory-pxe-base-url", factory.URL,
		// The simulated agents have no TPM: auto-accept takes machines without one too.
		"--auto-accept", "all", "--auto-accept-without-tpm",
		// The BMCs of the machines the benchmark allocates are given (the simulator's
		// power API); the others have none, so nothing polls BMCs that are not there.
		"--provision-bmc-credentials=false",
		"--power-idle-default", "on", "--power-poll-interval", pollInterval.String(),
	}

	if cfg.MemoryLimit != "" {
		r.args = append(r.args, "--memory-limit", cfg.MemoryLimit)
	}

	if cfg.State == StateEtcd {
		r.logf("starting a %d-member etcd cluster", etcdMembers)

		site, err := startEtcd(ctx, filepath.Join(cfg.WorkDir, "etcd"), cfg.EtcdBin)
		if err != nil {
			return nil, err
		}

		// Stopped after the provider (deferred below).
		defer func() {
			if err := site.stop(); err != nil {
				r.logf("%v", err)
			}
		}()

		r.args = append(r.args, site.providerArgs()...)
		r.meter.site = site
	}

	r.meter.mark(ctx, "start", 0)

	if err = r.startProvider(ctx); err != nil {
		return nil, err
	}

	defer func() { r.provider.Stop(10 * time.Second) }()

	sim, err := r.startFleet(ctx)
	if err != nil {
		return nil, err
	}

	defer sim.stop()

	err = r.scenario(ctx, sim)

	// What the phases cost, those run to their end at least.
	r.meter.finish(ctx, r.res)

	return r.res, err
}

func (r *run) logf(format string, args ...any) {
	if r.cfg.Log != nil {
		r.cfg.Log("fleet: "+format, args...)
	}
}

func (r *run) scenario(ctx context.Context, sim *fleetProcess) error {
	res, cfg := r.res, r.cfg

	// 1. Every machine registers; auto-accepted, each is wiped.
	r.logf("%d simulated machines booting", cfg.Machines)

	if err := r.waitAll(ctx, "first registration", func(m *simMachine) bool { return len(m.Registrations) > 0 }); err != nil {
		return err
	}

	res.RegisterTook = r.latest(func(m *simMachine) time.Time { return m.Registrations[0] }).Sub(sim.started)
	r.logf("all %d registered in %s (%.0f/s)", cfg.Machines, res.RegisterTook.Round(time.Millisecond), float64(cfg.Machines)/res.RegisterTook.Seconds())

	// A machine never accepted and wiped is a loss, not the end of the run.
	if err := r.waitAll(ctx, "acceptance wipe", func(m *simMachine) bool { return len(m.Wiped) > 0 }); err != nil {
		if exited, _ := r.provider.Exited(); exited || ctx.Err() != nil {
			return err
		}

		r.ev.view(func(ms map[string]*simMachine) {
			for id, m := range ms {
				if len(m.Wiped) == 0 {
					res.NotAccepted++
					res.problem("machine %s: never accepted and wiped", id)
				}
			}
		})
		r.logf("%v: going on without them", err)
	}

	res.AcceptWipeTook = r.latest(func(m *simMachine) time.Time {
		var last time.Time
		for _, t := range m.Wiped {
			last = maxTime(last, t)
		}

		return last
	}).Sub(sim.started)
	r.logf("all accepted and wiped %s after the start", res.AcceptWipeTook.Round(time.Millisecond))
	r.meter.mark(ctx, "registration, acceptance, wipe", cfg.Machines)

	initial := r.initialWipes()

	ctl, err := httpbench.Dial(filepath.Join(r.stateDir, "control.sock"))
	if err != nil {
		return err
	}
	defer ctl.Close()

	accepted := r.accepted()
	chosen := accepted[:min(len(accepted), cfg.Allocate)]
	res.BMCs = len(chosen)

	// The machines with a BMC already, from the BMC phase.
	hasBMC := map[string]bool{}

	if cfg.BMCs > 0 {
		given := accepted[:min(len(accepted), cfg.BMCs)]
		if err = r.giveBMCs(ctx, ctl, given); err != nil {
			return err
		}

		for _, id := range given {
			hasBMC[id] = true
		}

		res.BMCs = max(len(given), len(chosen))
		r.meter.mark(ctx, "BMCs given, each read once", len(given))
	}

	// 2. Allocate: cause (the call) to the order reaching the agent.
	allocAt, err := r.transition(ctx, chosen, func(ctx context.Context, id string) error {
		if hasBMC[id] {
			return nil // a SetBMC again would write the same BMC again
		}

		return r.setBMC(ctx, ctl, id)
	}, func(ctx context.Context, id string) error {
		_, err := ctl.Transitions().Allocate(ctx, &controlv1.AllocateRequest{MachineId: id, TalosVersion: cfg.TalosVersion})

		return err
	})
	if err != nil {
		return err
	}

	if err = r.waitSome(ctx, "allocation orders", chosen, func(m *simMachine) bool {
		return receivedAfter(m, allocAt[m.ID], "boot-allocation-", "kexec-")
	}); err != nil {
		return err
	}

	res.AllocOrder = r.latencies(chosen, allocAt, "boot-allocation-", "kexec-")
	r.logf("allocation orders: p50 %s p99 %s", res.AllocOrder.P50, res.AllocOrder.P99)

	if err = r.waitSome(ctx, "allocated machines in Talos", chosen, func(m *simMachine) bool { return m.Talos.After(allocAt[m.ID]) }); err != nil {
		return err
	}

	r.meter.mark(ctx, "allocation (allocate -> Talos)", len(chosen))

	// 3. Installed (as Talos' event sink would say), then deallocated: the reset wipe.
	if _, err = r.transition(ctx, chosen, nil, func(ctx context.Context, id string) error {
		_, err := ctl.Transitions().MarkInstalled(ctx, &controlv1.MarkInstalledRequest{MachineId: id})

		return err
	}); err != nil {
		return err
	}

	deallocAt, err := r.transition(ctx, chosen, nil, func(ctx context.Context, id string) error {
		_, err := ctl.Transitions().Deallocate(ctx, &controlv1.DeallocateRequest{MachineId: id})

		return err
	})
	if err != nil {
		return err
	}

	resetStarted := func(m *simMachine) bool { return receivedAfter(m, deallocAt[m.ID], "wipe-") }

	// 4. SIGKILL once half the reset wipes have begun.
	if err = r.waitCount(ctx, "reset wipes under way", chosen, len(chosen)/2, resetStarted); err != nil {
		return err
	}

	before, err := records(ctx, ctl)
	if err != nil {
		return err
	}

	inAgent, err := sim.agents(ctx)
	if err != nil {
		return err
	}

	res.SessionsAtKill = len(inAgent)

	r.kill()

	restartAt := time.Now()
	if err = r.startProvider(ctx); err != nil {
		return err
	}

	r.logf("provider killed with %d sessions up and restarted", len(inAgent))

	ctl.Close()

	if ctl, err = httpbench.Dial(filepath.Join(r.stateDir, "control.sock")); err != nil {
		return err
	}

	back := map[string]bool{}
	for _, id := range inAgent {
		back[id] = true
	}

	if err = r.waitFunc(ctx, "sessions back after the restart", func(ms map[string]*simMachine) (bool, string) {
		n := 0

		for id := range back {
			if m := ms[id]; m != nil && len(m.Registrations) > 0 && m.Registrations[len(m.Registrations)-1].After(restartAt) {
				n++
			}
		}

		return n == len(back), fmt.Sprintf("%d/%d", n, len(back))
	}); err != nil {
		return err
	}

	r.ev.view(func(ms map[string]*simMachine) {
		var last time.Time

		for id := range back {
			for _, t := range ms[id].Registrations {
				if t.After(restartAt) {
					last = maxTime(last, t)

					break
				}
			}
		}

		res.RestartBack = last.Sub(restartAt)
	})
	r.logf("all %d sessions back %s after the restart", len(back), res.RestartBack.Round(time.Millisecond))

	// 5. Every owed reset wipe is (re-)sent and done, and recorded.
	if err = r.waitSome(ctx, "reset wipes done", chosen, func(m *simMachine) bool { return wipedAfter(m, deallocAt[m.ID]) }); err != nil {
		r.logf("%v: counting the missing ones", err)
	}

	res.DeallocWipe = r.latencies(chosen, deallocAt, "wipe-")

	r.verify(ctx, ctl, before, initial, chosen, deallocAt)
	r.meter.mark(ctx, "installed, deallocate, restart, reset wipes", len(chosen))

	if cfg.Steady > 0 {
		if err = r.steady(ctx); err != nil {
			return err
		}
	}

	r.sampleProvider(true)

	res.StateBytes = dirSize(r.stateDir)

	return nil
}

// verify counts what was lost, once the reset wipes are recorded or the phase is over.
func (r *run) verify(ctx context.Context, ctl *httpbench.Control, before map[string]*machineRecord, initial map[string]string,
	chosen []string, deallocAt map[string]time.Time,
) {
	res := r.res
	touched := map[string]bool{}

	for _, id := range chosen {
		touched[id] = true
	}

	want := map[string]string{} // the erase report each machine must have
	disks := map[string]int{}

	r.ev.view(func(ms map[string]*simMachine) {
		for id, m := range ms {
			gen := initial[id]

			if touched[id] {
				gen = ""

				for g, t := range m.Wiped {
					if t.After(deallocAt[id]) {
						gen = g
					}
				}

				if gen == "" {
					res.NotResent++
					res.problem("machine %s: no reset wipe done", id)
				}
			}

			want[id], disks[id] = gen, m.Disks[gen]

			for g, n := range m.Started {
				if n > 1 {
					res.WipesTwice++
					res.problem("machine %s: wipe %s carried out %d times", id, g, n)
				}
			}
		}
	})

	var after map[string]*machineRecord

	deadline := time.Now().Add(r.cfg.Phase)

	for {
		var err error
		if after, err = records(ctx, ctl); err == nil && recorded(after, want) || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}

		time.Sleep(500 * time.Millisecond)
	}

	for id, gen := range want {
		rec := after[id]

		switch {
		case rec == nil || !rec.Known:
			res.Lost++
			res.problem("machine %s: not in the provider's state after the restart", id)
		case rec.Intent.Acceptance != "accepted":
			res.Lost++
			res.problem("machine %s: acceptance %q after the restart", id, rec.Intent.Acceptance)
		case gen == "":
		case rec.Status.LastWipe == nil || rec.Status.LastWipe.ID != gen || len(rec.Status.LastWipe.Disks) != disks[id]:
			res.ReportsLost++
			res.problem("machine %s: erase report %+v, want wipe %s of %d disks", id, rec.Status.LastWipe, gen, disks[id])
		}

		if b := before[id]; b != nil && !touched[id] && b.Status.WipedID != rec.Status.WipedID {
			res.ReportsLost++
			res.problem("machine %s: wiped id %q before the kill, %q after", id, b.Status.WipedID, rec.Status.WipedID)
		}
	}
}

func recorded(records map[string]*machineRecord, want map[string]string) bool {
	for id, gen := range want {
		rec := records[id]
		if rec == nil || gen != "" && (rec.Status.LastWipe == nil || rec.Status.LastWipe.ID != gen) {
			return false
		}
	}

	return true
}

// initialWipes is each machine's first wipe generation.
func (r *run) initialWipes() map[string]string {
	out := map[string]string{}

	r.ev.view(func(ms map[string]*simMachine) {
		for id, m := range ms {
			var first time.Time

			for g, t := range m.Wiped {
				if first.IsZero() || t.Before(first) {
					first, out[id] = t, g
				}
			}
		}
	})

	return out
}

// transition runs prepare then do for each machine, 8 at a time; it returns when each
// do was called (its cause: the latency's start).
func (r *run) transition(ctx context.Context, ids []string, prepare, do func(ctx context.Context, id string) error) (map[string]time.Time, error) {
	var (
		mu   sync.Mutex
		at   = map[string]time.Time{}
		errs []error
		wg   sync.WaitGroup
		next = make(chan string)
	)

	for range 8 {
		wg.Go(func() {
			for id := range next {
				cctx, cancel := context.WithTimeout(ctx, 30*time.Second)

				err := error(nil)
				if prepare != nil {
					err = prepare(cctx, id)
				}

				start := time.Now()
				if err == nil {
					err = do(cctx, id)
				}

				cancel()

				mu.Lock()
				at[id] = start

				if err != nil {
					errs = append(errs, fmt.Errorf("machine %s: %w", id, err))
				}
				mu.Unlock()
			}
		})
	}

	for _, id := range ids {
		next <- id
	}

	close(next)
	wg.Wait()

	if len(errs) > 0 {
		return at, fmt.Errorf("%d of %d transitions failed, first: %w", len(errs), len(ids), errs[0])
	}

	return at, nil
}

func receivedAfter(m *simMachine, after time.Time, prefixes ...string) bool {
	for id, t := range m.Received {
		for _, p := range prefixes {
			if strings.HasPrefix(id, p) && t.After(after) {
				return true
			}
		}
	}

	return false
}

func wipedAfter(m *simMachine, after time.Time) bool {
	for _, t := range m.Wiped {
		if t.After(after) {
			return true
		}
	}

	return false
}

// latencies are, per machine, from its cause to the first order of one of the prefixes
// received after it.
func (r *run) latencies(ids []string, cause map[string]time.Time, prefixes ...string) Latency {
	var ds []time.Duration

	r.ev.view(func(ms map[string]*simMachine) {
		for _, id := range ids {
			m, at := ms[id], cause[id]

			var first time.Time

			for order, t := range m.Received {
				for _, p := range prefixes {
					if strings.HasPrefix(order, p) && t.After(at) && (first.IsZero() || t.Before(first)) {
						first = t
					}
				}
			}

			if !first.IsZero() {
				ds = append(ds, first.Sub(at))
			}
		}
	})

	return latencyOf(ds)
}

func (r *run) latest(f func(m *simMachine) time.Time) time.Time {
	var last time.Time

	r.ev.view(func(ms map[string]*simMachine) {
		for _, m := range ms {
			last = maxTime(last, f(m))
		}
	})

	return last
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}

	return a
}

// waitAll waits until every machine satisfies ok.
func (r *run) waitAll(ctx context.Context, what string, ok func(m *simMachine) bool) error {
	return r.waitFunc(ctx, what, func(ms map[string]*simMachine) (bool, string) {
		n := 0

		for _, m := range ms {
			if ok(m) {
				n++
			}
		}

		return n == r.cfg.Machines, fmt.Sprintf("%d/%d", n, r.cfg.Machines)
	})
}

func (r *run) waitSome(ctx context.Context, what string, ids []string, ok func(m *simMachine) bool) error {
	return r.waitCount(ctx, what, ids, len(ids), ok)
}

func (r *run) waitCount(ctx context.Context, what string, ids []string, want int, ok func(m *simMachine) bool) error {
	return r.waitFunc(ctx, what, func(ms map[string]*simMachine) (bool, string) {
		n := 0

		for _, id := range ids {
			if m := ms[id]; m != nil && ok(m) {
				n++
			}
		}

		return n >= want, fmt.Sprintf("%d/%d", n, want)
	})
}

// waitFunc polls done until it says so, the phase's time is up, or the provider died.
func (r *run) waitFunc(ctx context.Context, what string, done func(ms map[string]*simMachine) (bool, string)) error {
	deadline := time.Now().Add(r.cfg.Phase)
	lastLog := time.Now()

	for {
		var (
			ok       bool
			progress string
		)

		r.ev.view(func(ms map[string]*simMachine) { ok, progress = done(ms) })

		if ok {
			return nil
		}

		r.sampleProvider(false)

		if exited, err := r.provider.Exited(); exited {
			return fmt.Errorf("the provider exited while waiting for %s (%s): %v", what, progress, err)
		}

		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %s after %s", what, progress, r.cfg.Phase)
		}

		if time.Since(lastLog) > 10*time.Second {
			r.logf("waiting for %s: %s", what, progress)
			lastLog = time.Now()
		}

		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (r *run) startProvider(ctx context.Context) error {
	r.lives++
	logPath := filepath.Join(r.cfg.WorkDir, fmt.Sprintf("provider-%d.log", r.lives))

	sock := filepath.Join(r.stateDir, "control.sock")
	_ = os.Remove(sock) // a killed provider's, which would read as up

	p, err := proc.Start("provider", exec.Command(r.cfg.ProviderBin, r.args...), logPath)
	if err != nil {
		return err
	}

	r.provider = p

	if err = p.WaitTCP(ctx, "127.0.0.1:"+strconv.Itoa(r.port), time.Minute); err != nil {
		return fmt.Errorf("%w (log: %s)", err, logPath)
	}

	for deadline := time.Now().Add(30 * time.Second); ; {
		if _, err = os.Stat(sock); err == nil {
			return nil
		}

		if time.Now().After(deadline) {
			return fmt.Errorf("no control socket %s (log: %s)", sock, logPath)
		}

		time.Sleep(50 * time.Millisecond)
	}
}

var errNoStatus = errors.New("no VmHWM in the status")

// sampleProvider reads the running provider's CPU time and peak RSS; final adds this
// life's figures to the result (the last reading stands for a killed provider).
func (r *run) sampleProvider(final bool) {
	pid := r.provider.Pid()

	if cpu, err := proc.CPUTime(pid); err == nil {
		r.lifeCPU = cpu
	}

	if hwm, err := statusBytes(pid, "VmHWM:"); err == nil {
		r.res.PeakRSS = max(r.res.PeakRSS, hwm)
	}

	// The runtime's figures are read when resident memory grew past the largest reading
	// so far by 2% (the metrics page lists every machine: not read on every poll).
	if rss, err := statusBytes(pid, "VmRSS:"); err == nil && rss > r.res.AtPeak.RSS+r.res.AtPeak.RSS/50 {
		if m, err := r.runtimeMemory(); err == nil {
			m.RSS = rss
			r.res.AtPeak = m
		}
	}

	if final {
		r.res.CPU += r.lifeCPU
		r.lifeCPU = 0
	}
}

// kill SIGKILLs the provider, as a power loss of its host would end it.
func (r *run) kill() {
	r.sampleProvider(true)

	_ = syscall.Kill(r.provider.Pid(), syscall.SIGKILL) // ESRCH: gone already
	<-r.provider.Done()
	r.provider.Stop(0) // closes its log
}

// statusBytes reads a size field (VmHWM:, VmRSS:) of the process' status.
func statusBytes(pid int, field string) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, fmt.Errorf("error reading the status of %d: %w", pid, err)
	}

	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			f := strings.Fields(v)
			if len(f) == 0 {
				break
			}

			kb, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("error parsing %s %q: %w", field, v, err)
			}

			return kb << 10, nil
		}
	}

	return 0, fmt.Errorf("%w: %s", errNoStatus, field)
}

// runtimeMemory reads the Go runtime's memory figures from the provider's /metrics.
func (r *run) runtimeMemory() (Memory, error) {
	client := http.Client{Timeout: 5 * time.Second}

	resp, err := client.Get("http://127.0.0.1:" + strconv.Itoa(r.port) + "/metrics")
	if err != nil {
		return Memory{}, fmt.Errorf("error reading the provider's metrics: %w", err)
	}
	defer resp.Body.Close()

	var m Memory

	fields := map[string]func(v float64){
		"go_memstats_heap_inuse_bytes":  func(v float64) { m.HeapInuse = int64(v) },
		"go_memstats_stack_inuse_bytes": func(v float64) { m.StackInuse = int64(v) },
		"go_memstats_next_gc_bytes":     func(v float64) { m.NextGC = int64(v) },
		"go_goroutines":                 func(v float64) { m.Goroutines = int(v) },
	}

	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)

	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if set := fields[name]; ok && set != nil {
			if v, err := strconv.ParseFloat(value, 64); err == nil {
				set(v)
			}
		}
	}

	if err = sc.Err(); err != nil {
		return Memory{}, fmt.Errorf("error reading the provider's metrics: %w", err)
	}

	return m, nil
}

func dirSize(dir string) int64 {
	var n int64

	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil //nolint:nilerr // a file gone meanwhile does not count
		}

		if info, err := d.Info(); err == nil && info.Mode().IsRegular() {
			n += info.Size()
		}

		return nil
	})

	return n
}
