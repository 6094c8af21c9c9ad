package fleetbench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// fleetProcess is the fleet simulator running.
type fleetProcess struct {
	cmd     *exec.Cmd
	log     *os.File
	done    chan struct{}
	started time.Time
	addr    string
}

func (r *run) startFleet(ctx context.Context) (*fleetProcess, error) {
	cfg := r.cfg

	args := []string{
		"-provider", "http://127.0.0.1:" + strconv.Itoa(r.port), "-n", strconv.Itoa(cfg.Machines),
		"-wipe-fast", cfg.WipeFast.String(),
		// Allocated machines reboot into Talos through the firmware: a kexec would have
		// the provider fetch Talos from the factory stand-in, which is not what this measures.
		"-kexec=false",
	}

	if cfg.SMBIOSDir != "" {
		args = append(args, "-smbios-dir", cfg.SMBIOSDir)
	}

	log, err := os.Create(filepath.Join(cfg.WorkDir, "fleetsim.log"))
	if err != nil {
		return nil, fmt.Errorf("error creating the simulator's log: %w", err)
	}

	events, err := os.Create(filepath.Join(cfg.WorkDir, "fleetsim-events.jsonl"))
	if err != nil {
		log.Close()

		return nil, fmt.Errorf("error creating the simulator's event file: %w", err)
	}

	cmd := exec.Command(cfg.FleetsimBin, args...)
	cmd.Stderr = log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}

	stdout, err := cmd.StdoutPipe()
	if err != nil {
		log.Close()
		events.Close()

		return nil, fmt.Errorf("error piping the simulator's events: %w", err)
	}

	p := &fleetProcess{cmd: cmd, log: log, done: make(chan struct{})}

	if err = cmd.Start(); err != nil {
		log.Close()
		events.Close()

		return nil, fmt.Errorf("error starting the fleet simulator: %w", err)
	}

	p.started = time.Now()

	// The reader ends with the simulator's stdout; the events are kept in a file too.
	go func() {
		defer close(p.done)
		defer events.Close()

		r.ev.read(io.TeeReader(stdout, events))
	}()

	for deadline := time.Now().Add(time.Minute); r.ev.listenAddress() == ""; {
		if time.Now().After(deadline) || ctx.Err() != nil {
			p.stop()

			return nil, fmt.Errorf("the fleet simulator did not start (log: %s)", log.Name())
		}

		time.Sleep(20 * time.Millisecond)
	}

	p.addr = r.ev.listenAddress()
	r.simAddr = p.addr

	return p, nil
}

// stop ends the simulator (SIGTERM, then SIGKILL after 20 s) and waits for its events.
func (p *fleetProcess) stop() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM) // ESRCH: gone already

	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL) // ESRCH: gone meanwhile
		<-p.done
	}

	_ = p.cmd.Wait() // ended by a signal: its status says so
	p.log.Close()
}

// agents lists the machines running the agent now (the simulator's GET /machines).
func (p *fleetProcess) agents(ctx context.Context) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.addr+"/machines", nil)
	if err != nil {
		return nil, fmt.Errorf("error asking the simulator for its machines: %w", err)
	}

	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("error asking the simulator for its machines: %w", err)
	}
	defer resp.Body.Close()

	var ms []struct {
		Machine string `json:"machine"`
		State   string `json:"state"`
	}

	if err = json.NewDecoder(resp.Body).Decode(&ms); err != nil {
		return nil, fmt.Errorf("error reading the simulator's machines: %w", err)
	}

	var out []string

	for _, m := range ms {
		if m.State == "agent" {
			out = append(out, m.Machine)
		}
	}

	return out, nil
}
