//go:build lab

package chaos

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/anvil-metal/anvil/hack/internal/labtest"
)

// simFleet is the grid's machines in the fleet simulator (agent/cmd/fleetsim): real
// agent sessions, driven through its stdin controls and its power API, read back from
// its JSON-line events.
type simFleet struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *lockedBuffer
	done   chan struct{} // closed when the events are read to their end

	mu       sync.Mutex
	listen   string
	ids      []string
	machines map[string]*simRecord
	ready    chan struct{} // closed once every machine is listed
	n        int
}

// simRecord is a machine's record, kept from the simulator's events.
type simRecord struct {
	machineRecord

	tenant bool
}

// fleetsimEvent is the part of the simulator's events the grid reads (the package doc
// of agent/internal/fleetsim has them all).
type fleetsimEvent struct {
	Event    string `json:"event"`
	Machine  string `json:"machine"`
	Address  string `json:"address"`
	Boot     int    `json:"boot"`
	Decision string `json:"decision"`
	Order    string `json:"order"`
	Kind     string `json:"kind"`
	Wipe     string `json:"wipe"`
	Status   string `json:"status"`
	Disks    int    `json:"disks"`
	Via      string `json:"via"`
	State    string `json:"state"`
	Cmd      string `json:"cmd"`
	Error    string `json:"error"`
}

// startFleet builds the simulator and runs n machines against the provider (they boot
// at once and register, pending, until their cells take them on); it is stopped (SIGTERM, then waited for) when the test ends.
func startFleet(t *testing.T, n int, providerURL string, args ...string) *simFleet {
	t.Helper()

	bin := filepath.Join(t.TempDir(), "fleetsim")
	labtest.GoBuild(t, labtest.RepoRoot(t), bin, "./agent/cmd/fleetsim")

	f := &simFleet{
		t: t, stderr: &lockedBuffer{}, done: make(chan struct{}), machines: map[string]*simRecord{},
		ready: make(chan struct{}), n: n,
	}

	f.cmd = exec.Command(bin, append([]string{
		"-provider", providerURL, "-n", fmt.Sprint(n), "-seed", "15", "-listen", "127.0.0.1:0",
		"-kexec=false", "-boot-retry", "500ms", "-reboot-delay", "300ms",
	}, args...)...)
	f.cmd.Stderr = f.stderr

	var err error

	if f.stdin, err = f.cmd.StdinPipe(); err != nil {
		t.Fatalf("error piping the simulator's stdin: %v", err)
	}

	stdout, err := f.cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("error piping the simulator's stdout: %v", err)
	}

	if err = f.cmd.Start(); err != nil {
		t.Fatalf("error starting the simulator: %v", err)
	}

	go f.read(stdout) // ends with the process's stdout

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
			t.Logf("fleet simulator's log:\n%s", f.stderr.String())
		}
	})

	select {
	case <-f.ready:
	case <-f.done:
		t.Fatalf("the simulator ended before listing its machines:\n%s", f.stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("the simulator did not list its machines:\n%s", f.stderr.String())
	}

	return f
}

func (f *simFleet) read(r io.Reader) {
	defer close(f.done)

	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)

	for sc.Scan() {
		var e fleetsimEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			fmt.Fprintf(f.stderr, "chaos: unreadable event %q: %v\n", sc.Text(), err)

			continue
		}

		f.apply(e)
	}
}

func (f *simFleet) apply(e fleetsimEvent) {
	f.mu.Lock()
	defer f.mu.Unlock()

	switch e.Event {
	case "listening":
		f.listen = e.Address

		return
	case "machine":
		f.ids = append(f.ids, e.Machine)
		f.machines[e.Machine] = &simRecord{machineRecord: machineRecord{
			executed: map[string]int{}, received: map[string]int{}, wipeStarts: map[string]int{},
			wipesDone: map[string]int{}, wipeDisks: map[string]int{},
		}}

		if len(f.ids) == f.n {
			close(f.ready)
		}

		return
	case "control":
		if e.Error != "" {
			fmt.Fprintf(f.stderr, "chaos: control %q failed: %s\n", e.Cmd, e.Error)
		}

		return
	}

	m := f.machines[e.Machine]
	if m == nil {
		return
	}

	switch e.Event {
	case "boot-script":
		m.on = true

		switch e.Decision {
		case bootAgent, bootTalos, bootDisk:
			m.running = e.Decision
			m.boots = append(m.boots, e.Decision)
		default:
			m.running = ""
		}
	case "registered":
		m.registered++
	case "order-received":
		m.received[e.Order]++
	case "order-started":
		if e.Kind == "wipe" {
			m.wipeStarts[e.Wipe]++

			if m.tenant {
				m.violations = append(m.violations, fmt.Sprintf("wipe %s started on a machine holding an installed Talos: data loss", e.Wipe))
			}
		}
	case "order-done":
		if e.Status != "done" {
			break
		}

		m.executed[e.Order]++

		if e.Kind == "wipe" {
			m.wipesDone[e.Wipe]++
			m.wipeDisks[e.Wipe] = e.Disks
		}
	case "rebooting":
		m.running = ""
	case "talos":
		if e.Via == "disk" {
			m.running = bootDisk
		} else {
			m.running = bootTalos
		}
	case "power":
		m.on = e.State == "on"
		m.running = ""
	}
}

func (f *simFleet) command(cmd, uuid string) {
	if _, err := fmt.Fprintf(f.stdin, "%s %s\n", cmd, uuid); err != nil {
		f.t.Errorf("error telling the simulator %s %s: %v", cmd, uuid, err)
	}
}

func (f *simFleet) uuids() []string {
	f.mu.Lock()
	defer f.mu.Unlock()

	return append([]string(nil), f.ids...)
}

func (f *simFleet) powerOn(uuid string)  { f.command("poweron", uuid) }
func (f *simFleet) powerCut(uuid string) { f.command("powercut", uuid) }
func (f *simFleet) cut(uuid string)      { f.command("cut", uuid) }
func (f *simFleet) restore(uuid string)  { f.command("restore", uuid) }

func (f *simFleet) setTenant(uuid string, on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()

	f.machines[uuid].tenant = on
}

func (f *simFleet) record(uuid string) machineRecord {
	f.mu.Lock()
	defer f.mu.Unlock()

	m := f.machines[uuid]
	r := m.machineRecord

	r.boots = append([]string(nil), m.boots...)
	r.violations = append([]string(nil), m.violations...)

	for _, mp := range []*map[string]int{&r.executed, &r.received, &r.wipeStarts, &r.wipesDone, &r.wipeDisks} {
		cp := make(map[string]int, len(*mp))
		for k, v := range *mp {
			cp[k] = v
		}

		*mp = cp
	}

	return r
}

// power is the simulator's own power API, through which the provider drives the machines.
func (f *simFleet) power() http.Handler {
	f.mu.Lock()
	defer f.mu.Unlock()

	return httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: f.listen})
}

// lockedBuffer is a log written and read at once.
type lockedBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()

	b.buf = append(b.buf, p...)

	return len(p), nil
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()

	return string(b.buf)
}
