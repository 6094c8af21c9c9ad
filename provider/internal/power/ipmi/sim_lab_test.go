//go:build lab

package ipmi

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anvil-metal/anvil/internal/freeport"
	"github.com/anvil-metal/anvil/internal/ipmisim"
	"github.com/anvil-metal/anvil/provider/internal/power"
)

const (
	simUser     = "admin"
	simPassword = "s3cret-pw"
)

// sim is one ipmi_sim (internal/ipmisim) serving RMCP+ on a free loopback UDP port.
type sim struct {
	*ipmisim.Sim

	// chassis is the file chassis's directory (simChassisControl).
	chassis string
}

// simMode picks how the simulator powers the "machine".
type simMode int

const (
	// simStartcmd: power on runs a start command (a long sleep), power off kills it.
	simStartcmd simMode = iota
	// simChassisControl: a chassis control program keeps power and boot device in
	// files; ipmi_sim (2.0.33) answers boot options only with such a program.
	simChassisControl
)

// startSim runs ipmi_sim with its config under t.TempDir(); t.Cleanup stops it and the
// machine it started, pass or fail.
func startSim(t *testing.T, mode simMode) *sim {
	t.Helper()

	if _, err := exec.LookPath("ipmi_sim"); err != nil {
		t.Skip("ipmi_sim is not installed (Debian package openipmi); skipping the tests against a real BMC simulator")
	}

	dir := t.TempDir()
	c := ipmisim.Config{
		Name: "anvil-test", Dir: filepath.Join(dir, "bmc"), GUID: "a123456789abcdefa123456789abcdef",
		LANAddr: "127.0.0.1", LANPort: freeUDPPort(t), SerialPort: freeTCPPort(t),
		Users: []ipmisim.User{
			{ID: 1, Enabled: true, Name: "", Password: "x", Privilege: "user"},
			{ID: 2, Enabled: true, Name: simUser, Password: simPassword, Privilege: "admin"},
		},
	}

	s := &sim{}

	switch mode {
	case simStartcmd:
		c.StartCommand = []string{"sleep", "600"}
	case simChassisControl:
		s.chassis = filepath.Join(dir, "chassis")

		var err error
		if c.ChassisCommand, err = ipmisim.FileChassis(s.chassis); err != nil {
			t.Fatal(err)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	started, err := ipmisim.Start(ctx, c, "")
	if err != nil {
		t.Fatalf("starting ipmi_sim: %v", err)
	}

	s.Sim = started

	t.Cleanup(func() {
		started.Stop()

		if t.Failed() {
			if b, err := os.ReadFile(c.Log()); err == nil {
				t.Logf("ipmi_sim log:\n%s", b)
			}
		}
	})

	return s
}

func (s *sim) endpoint() power.Endpoint {
	return power.Endpoint{Backend: power.BackendIPMI, Address: "127.0.0.1", Port: s.Config.LANPort, Username: simUser, Password: simPassword}
}

// machinePID is the pid of the running machine (the start command's sleep), or 0.
func (s *sim) machinePID() int { return s.Config.MachinePID() }

// ipmitool runs ipmitool against the simulator (skips if it is not installed).
func (s *sim) ipmitool(t *testing.T, args ...string) string {
	t.Helper()

	if _, err := exec.LookPath("ipmitool"); err != nil {
		t.Skip("ipmitool is not installed")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	c := &ipmisim.Client{Addr: "127.0.0.1", Port: s.Config.LANPort, User: simUser, Password: simPassword}

	out, err := c.Run(ctx, args...)
	if err != nil {
		t.Fatal(err)
	}

	return out
}

// relay forwards UDP between a client and a BMC on loopback, holding the BMC's answers
// back by a delay that can change while it runs.
type relay struct {
	port  int
	delay atomic.Int64 // nanoseconds
}

func startRelay(t *testing.T, upstreamPort int) *relay {
	t.Helper()

	front, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}

	back, err := net.DialUDP("udp", nil, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: upstreamPort})
	if err != nil {
		front.Close()
		t.Fatal(err)
	}

	r := &relay{port: front.LocalAddr().(*net.UDPAddr).Port}

	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		client *net.UDPAddr
		timers []*time.Timer
		closed bool
	)

	wg.Add(2)

	go func() { // client -> BMC, at once
		defer wg.Done()

		buf := make([]byte, 4096)

		for {
			n, from, err := front.ReadFromUDP(buf)
			if err != nil {
				return
			}

			mu.Lock()
			client = from
			mu.Unlock()

			back.Write(buf[:n]) //nolint:errcheck // UDP: a lost datagram is the BMC's to retry
		}
	}()

	go func() { // BMC -> client, after the delay
		defer wg.Done()

		buf := make([]byte, 4096)

		for {
			n, err := back.Read(buf)
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}

				continue // ICMP refusals while the BMC is not there yet
			}

			pkt := append([]byte(nil), buf[:n]...)

			mu.Lock()
			to := client

			if !closed && to != nil {
				timers = append(timers, time.AfterFunc(time.Duration(r.delay.Load()), func() {
					front.WriteToUDP(pkt, to) //nolint:errcheck // UDP: a lost datagram is the client's to retry
				}))
			}
			mu.Unlock()
		}
	}()

	t.Cleanup(func() {
		mu.Lock()
		closed = true

		for _, tm := range timers {
			tm.Stop()
		}
		mu.Unlock()

		front.Close()
		back.Close()
		wg.Wait()
	})

	return r
}

func freeTCPPort(t *testing.T) int {
	t.Helper()

	port, err := freeport.TCP()
	if err != nil {
		t.Fatal(err)
	}

	return port
}

func writeFile(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()

	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}
