package ipmi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/anvil-metal/anvil/internal/freeport"
	"github.com/anvil-metal/anvil/provider/internal/power"
)

const (
	simUser     = "admin"
	simPassword = "s3cret-pw"
)

// sim is one ipmi_sim serving RMCP+ on a free loopback UDP port.
type sim struct {
	port    int
	dir     string
	pidFile string // the startcmd script writes the pid of its sleep here
}

// simMode picks how the simulator powers the "machine".
type simMode int

const (
	// simStartcmd: power on runs startcmd (a long sleep), power off kills it.
	simStartcmd simMode = iota
	// simChassisControl: a chassis_control script keeps power and boot device in files;
	// ipmi_sim (2.0.33) answers boot options only with such a script, VM or not.
	simChassisControl
)

// startSim runs ipmi_sim with its config under t.TempDir(); t.Cleanup kills it and
// anything it started, pass or fail.
func startSim(t *testing.T, mode simMode) *sim {
	t.Helper()

	bin, err := exec.LookPath("ipmi_sim")
	if err != nil {
		t.Skip("ipmi_sim is not installed (Debian package openipmi); skipping the tests against a real BMC simulator")
	}

	dir := t.TempDir()
	s := &sim{port: freeUDPPort(t), dir: dir, pidFile: filepath.Join(dir, "machine.pid")}

	start := filepath.Join(dir, "start.sh")
	writeFile(t, start, fmt.Sprintf("#!/bin/sh\necho $$ > %s\nexec sleep 600\n", s.pidFile), 0o755)

	control := ""

	if mode == simChassisControl {
		script := filepath.Join(dir, "chassis.sh")
		// ipmi_sim runs it as "chassis.sh get parm..." or "chassis.sh set parm val...".
		writeFile(t, script, fmt.Sprintf(`#!/bin/sh
cd %s || exit 1
echo "$@" >> chassis.log
op=$1; shift
case $op in
get) for p in "$@"; do
	case $p in
	power) echo "power:$(cat power 2>/dev/null || echo 0)" ;;
	boot) echo "boot:$(cat boot 2>/dev/null || echo default)" ;;
	esac
done ;;
set) while [ $# -ge 2 ]; do
	case $1 in power) echo "$2" > power ;; boot) echo "$2" > boot ;; esac
	shift 2
done ;;
*) exit 1 ;;
esac
`, dir), 0o755)

		control = fmt.Sprintf("chassis_control %q\n", script)
	}

	// The serial VM line gives ipmi_sim its system interface (channel 15), without which
	// it refuses chassis power control; nothing connects to it here.
	lan := fmt.Sprintf(`name "anvil-test"
set_working_mc 0x20
startlan 1
  addr 127.0.0.1 %d
  priv_limit admin
  allowed_auths_callback none md2 md5 straight
  allowed_auths_user none md2 md5 straight
  allowed_auths_operator none md2 md5 straight
  allowed_auths_admin none md2 md5 straight
  guid a123456789abcdefa123456789abcdef
endlan
serial 15 127.0.0.1 %d codec VM
%sstartcmd %q
startnow false
poweroff_wait 1
kill_wait 1
user 1 true "" "x" user 10 none md2 md5 straight
user 2 true %q %q admin 10 none md2 md5 straight
`, s.port, freeTCPPort(t), control, start, simUser, simPassword)

	writeFile(t, filepath.Join(dir, "lan.conf"), lan, 0o644)
	writeFile(t, filepath.Join(dir, "bmc.emu"), "mc_setbmc 0x20\n"+
		"mc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02 persist_sdr\n"+
		"mc_enable 0x20\n", 0o644)

	state := filepath.Join(dir, "state")
	if err = os.Mkdir(state, 0o755); err != nil {
		t.Fatal(err)
	}

	logFile, err := os.Create(filepath.Join(dir, "ipmi_sim.log"))
	if err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(bin, "-c", filepath.Join(dir, "lan.conf"), "-f", filepath.Join(dir, "bmc.emu"), "-n", "-s", state)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}

	if err = cmd.Start(); err != nil {
		t.Fatalf("starting ipmi_sim: %v", err)
	}

	t.Cleanup(func() {
		// The machine's sleep may live in its own process group: kill it by pid first.
		if pid := s.machinePID(); pid > 0 {
			syscall.Kill(pid, syscall.SIGKILL) //nolint:errcheck
		}

		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) //nolint:errcheck
		cmd.Wait()                                      //nolint:errcheck
		logFile.Close()                                 //nolint:errcheck

		if t.Failed() {
			if b, err := os.ReadFile(logFile.Name()); err == nil {
				t.Logf("ipmi_sim log:\n%s", b)
			}
		}
	})

	// Ready once a session opens.
	deadline := time.Now().Add(10 * time.Second)

	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c, err := Dial(ctx, s.endpoint())

		cancel()

		if err == nil {
			c.Close() //nolint:errcheck

			return s
		}

		if time.Now().After(deadline) {
			t.Fatalf("ipmi_sim did not open a session within 10 s: %v", err)
		}

		time.Sleep(50 * time.Millisecond)
	}
}

func (s *sim) endpoint() power.Endpoint {
	return power.Endpoint{Kind: power.KindIPMI, Address: "127.0.0.1", Port: s.port, Username: simUser, Password: simPassword}
}

// machinePID is the pid of the running machine (the startcmd sleep), or 0.
func (s *sim) machinePID() int {
	b, err := os.ReadFile(s.pidFile)
	if err != nil {
		return 0
	}

	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}

	if syscall.Kill(pid, 0) != nil {
		return 0
	}

	return pid
}

// ipmitool runs ipmitool against the simulator (skips if it is not installed).
func (s *sim) ipmitool(t *testing.T, args ...string) string {
	t.Helper()

	if _, err := exec.LookPath("ipmitool"); err != nil {
		t.Skip("ipmitool is not installed")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	base := []string{"-I", "lanplus", "-C", "3", "-H", "127.0.0.1", "-p", strconv.Itoa(s.port), "-U", simUser, "-P", simPassword}

	out, err := exec.CommandContext(ctx, "ipmitool", append(base, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("ipmitool %v: %v\n%s", args, err, out)
	}

	return string(out)
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
		front.Close() //nolint:errcheck
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

			back.Write(buf[:n]) //nolint:errcheck
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
					front.WriteToUDP(pkt, to) //nolint:errcheck
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

		front.Close() //nolint:errcheck
		back.Close()  //nolint:errcheck
		wg.Wait()
	})

	return r
}

func freeUDPPort(t *testing.T) int {
	t.Helper()

	port, err := freeport.UDP()
	if err != nil {
		t.Fatal(err)
	}

	return port
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
