package testprovider

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var fleetBuild struct {
	once sync.Once
	bin  string
	err  error
}

// Fleet is the fleet simulator (agent/cmd/fleetsim) running machines against a provider:
// real agent sessions on loopback, simulated hardware, wipes and power. Its machines
// boot at once and register, pending.
type Fleet struct {
	// PowerURL is its power API (BMC kind "api"), for every machine.
	PowerURL string
	// UUIDs are its machines' IDs, in order.
	UUIDs []string

	cmd    *exec.Cmd
	stdin  io.WriteCloser
	mu     sync.Mutex
	events []string
	stderr *LogBuffer
	done   chan struct{}
}

// FleetOptions say what the simulator runs.
type FleetOptions struct {
	// N machines of Seed (their identities follow from it).
	N, Seed int
	// Args come after the simulator's own: -wipe-fast 1s, -kexec=false…
	Args []string
	// OnEvent, when set, hears every event line as the simulator prints it (from the
	// goroutine that reads them): a test keeping its own record of the machines.
	OnEvent func(line []byte)
}

// StartFleet runs n machines of seed against the provider at providerURL, with args
// after: StartFleetWith without an event hook.
func StartFleet(t *testing.T, providerURL string, n, seed int, args ...string) *Fleet {
	t.Helper()

	return StartFleetWith(t, providerURL, FleetOptions{N: n, Seed: seed, Args: args})
}

// StartFleetWith builds the simulator (once per test binary) and runs it against the
// provider at providerURL until every machine is listed; it is stopped when the test
// ends, its events and log printed if the test failed.
func StartFleetWith(t *testing.T, providerURL string, opts FleetOptions) *Fleet {
	t.Helper()

	n := opts.N

	fleetBuild.once.Do(func() {
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Join(filepath.Dir(file), "..", "..")

		Binaries(t) // the build directory, removed by Main

		fleetBuild.bin = filepath.Join(build.dir, "fleetsim")
		cmd := exec.Command("go", "build", "-o", fleetBuild.bin, "./agent/cmd/fleetsim")
		cmd.Dir = root

		if b, err := cmd.CombinedOutput(); err != nil {
			fleetBuild.err = fmt.Errorf("error building the fleet simulator: %w\n%s", err, b)
		}
	})
	require.NoError(t, fleetBuild.err)

	f := &Fleet{stderr: &LogBuffer{}, done: make(chan struct{})}
	f.cmd = exec.Command(fleetBuild.bin, append([]string{
		"-provider", providerURL, "-n", fmt.Sprint(n), "-seed", fmt.Sprint(opts.Seed), "-listen", "127.0.0.1:0",
	}, opts.Args...)...)
	f.cmd.Stderr = f.stderr

	var err error

	f.stdin, err = f.cmd.StdinPipe()
	require.NoError(t, err)

	stdout, err := f.cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, f.cmd.Start())

	ready := make(chan struct{})

	go f.read(stdout, n, ready, opts.OnEvent)

	t.Cleanup(func() {
		_ = f.cmd.Process.Signal(syscall.SIGTERM) // fails only if it is gone already

		select {
		case <-f.done:
		case <-time.After(30 * time.Second):
			_ = f.cmd.Process.Kill()
			<-f.done
		}

		_ = f.cmd.Wait() // stopped by us: its exit status says so

		if t.Failed() {
			t.Logf("fleet simulator's events:\n%s\nits log:\n%s", f.Events(), f.stderr.String())
		}
	})

	select {
	case <-ready:
	case <-f.done:
		t.Fatalf("the fleet simulator ended before listing its machines:\n%s", f.stderr.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("the fleet simulator did not list its machines:\n%s", f.stderr.String())
	}

	return f
}

// Events are the simulator's events so far, one JSON object per line.
func (f *Fleet) Events() string {
	f.mu.Lock()
	defer f.mu.Unlock()

	return strings.Join(f.events, "\n")
}

// Log is the simulator's own log (its stderr) so far.
func (f *Fleet) Log() string { return f.stderr.String() }

// Command sends a control command (poweron, powercut, cut, restore) for a machine.
func (f *Fleet) Command(cmd, uuid string) error {
	_, err := fmt.Fprintf(f.stdin, "%s %s\n", cmd, uuid)

	return err
}

func (f *Fleet) read(r io.Reader, n int, ready chan<- struct{}, onEvent func([]byte)) {
	defer close(f.done)

	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)

	for sc.Scan() {
		var e struct{ Event, Machine, Address string }
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			fmt.Fprintf(f.stderr, "testprovider: unreadable fleet event %q: %v\n", sc.Text(), err)

			continue
		}

		if onEvent != nil {
			onEvent(sc.Bytes())
		}

		f.mu.Lock()
		f.events = append(f.events, sc.Text())

		switch e.Event {
		case "listening":
			f.PowerURL = "http://" + e.Address
		case "machine":
			f.UUIDs = append(f.UUIDs, e.Machine)
			if len(f.UUIDs) == n {
				close(ready)
			}
		}
		f.mu.Unlock()
	}
}
