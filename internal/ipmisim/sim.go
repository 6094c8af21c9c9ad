package ipmisim

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/anvil-metal/anvil/internal/netns"
	"github.com/anvil-metal/anvil/internal/proc"
)

// ListenTimeout bounds how long Start waits for ipmi_sim to serve its LAN.
const ListenTimeout = 15 * time.Second

// Sim is an ipmi_sim the caller owns (Start).
type Sim struct {
	Config Config

	child *proc.Child
}

// Start writes c's files and runs ipmi_sim for c in network namespace ns ("" for the
// caller's) as a child the caller owns, and returns once it serves its LAN. Stop ends
// it and the machine it started; so does the caller's death (the kernel kills it).
func Start(ctx context.Context, c Config, ns string) (*Sim, error) {
	cmd, console, err := c.command(ns)
	if err != nil {
		return nil, err
	}

	child, err := proc.Start("ipmi_sim "+c.Name, cmd, c.Log())

	console.Close() // ipmi_sim has its own copy, or failed to start

	if err != nil {
		return nil, fmt.Errorf("error starting the BMC %s: %w", c.Name, err)
	}

	s := &Sim{Config: c, child: child}

	wctx, cancel := context.WithTimeout(ctx, ListenTimeout)
	defer cancel()

	if err := WaitListening(wctx, child.Pid(), c.LANAddr, c.LANPort); err != nil {
		s.Stop()

		return nil, err
	}

	return s, nil
}

// Pid is ipmi_sim's.
func (s *Sim) Pid() int { return s.child.Pid() }

// Stop ends ipmi_sim and the machine it started (a start command's), which may lead a
// process group of its own. It is safe to call more than once.
func (s *Sim) Stop() {
	if pid := s.Config.MachinePID(); pid > 0 {
		syscall.Kill(pid, syscall.SIGKILL) //nolint:errcheck // ESRCH: gone meanwhile
	}

	s.child.Stop(2 * time.Second)
}

// StartDaemon writes c's files and runs ipmi_sim for c in network namespace ns ("" for
// the caller's) as a daemon that outlives the caller (see proc.StartDaemon): the lab
// records the pid, waits for it (WaitListening) and ends it with proc.Stop.
func StartDaemon(c Config, ns string) (int, error) {
	cmd, console, err := c.command(ns)
	if err != nil {
		return 0, err
	}

	defer console.Close() // ipmi_sim has its own copy

	pid, err := proc.StartDaemon(cmd, c.Log())
	if err != nil {
		return 0, fmt.Errorf("error starting the BMC %s: %w", c.Name, err)
	}

	return pid, nil
}

// command writes c's files and makes ipmi_sim's command, with its console on stdin,
// which the caller closes once ipmi_sim started.
func (c *Config) command(ns string) (*exec.Cmd, *os.File, error) {
	if err := c.Write(); err != nil {
		return nil, nil, err
	}

	// A pid from an earlier run may be another process's by now.
	if err := os.Remove(c.MachinePIDFile()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, nil, fmt.Errorf("error removing the machine pid of BMC %s: %w", c.Name, err)
	}

	console, err := c.OpenConsole()
	if err != nil {
		return nil, nil, err
	}

	argv := netns.Argv(ns, append([]string{"ipmi_sim"}, c.Args()...)...)

	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin = console
	cmd.Dir = c.Dir

	return cmd, console, nil
}

// MachinePID is the pid of the machine the start command runs, 0 when none runs.
func (c *Config) MachinePID() int {
	b, err := os.ReadFile(c.MachinePIDFile())
	if err != nil {
		return 0
	}

	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || !proc.Alive(pid) {
		return 0
	}

	return pid
}

// OpenConsole opens the FIFO ipmi_sim takes as its console (stdin), creating it first.
// Opened read-write, the FIFO never reaches end of file, which would stop ipmi_sim,
// even after the process that started ipmi_sim exits; the caller closes its copy once
// ipmi_sim has started.
func (c *Config) OpenConsole() (*os.File, error) {
	if err := syscall.Mkfifo(c.Console(), 0o600); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("error creating the console of BMC %s: %w", c.Name, err)
	}

	f, err := os.OpenFile(c.Console(), os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("error opening the console of BMC %s: %w", c.Name, err)
	}

	return f, nil
}

// WaitListening waits until process pid (ipmi_sim) has bound UDP addr:port, or ctx
// ends, reading its namespace's socket table: a probe would open a session, which the
// tests count.
func WaitListening(ctx context.Context, pid int, addr string, port int) error {
	for {
		ok, err := udpBound("/proc/"+strconv.Itoa(pid)+"/net/udp", addr, port)
		if ok {
			return nil
		}

		if !proc.Alive(pid) {
			return fmt.Errorf("ipmi_sim (pid %d) exited before it listened on %s:%d", pid, addr, port)
		}

		select {
		case <-ctx.Done():
			return fmt.Errorf("ipmi_sim (pid %d) did not listen on %s:%d: %w (last read: %v)", pid, addr, port, ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// udpBound reports whether the socket table at path (/proc/…/net/udp) has a socket
// bound to addr:port.
func udpBound(path, addr string, port int) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, fmt.Errorf("error reading the socket table: %w", err)
	}
	defer f.Close()

	return findUDP(f, addr, port)
}

// findUDP scans a /proc/net/udp table for a local address addr:port. The kernel
// writes the IPv4 address as the hex of its in-memory (network order) bytes read as a
// host-order (little-endian here) word, and the port in plain hex.
func findUDP(r io.Reader, addr string, port int) (bool, error) {
	ip := net.ParseIP(addr).To4()
	if ip == nil {
		return false, fmt.Errorf("%q is not an IPv4 address", addr)
	}

	want := fmt.Sprintf("%02X%02X%02X%02X:%04X", ip[3], ip[2], ip[1], ip[0], port)

	sc := bufio.NewScanner(r)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 1 && fields[1] == want {
			return true, nil
		}
	}

	return false, sc.Err()
}
