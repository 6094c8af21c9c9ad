package bmcsim

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

	"github.com/anvil-metal/anvil/hack/internal/labnet"
	"github.com/anvil-metal/anvil/hack/internal/proc"
)

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

// WaitListening waits until process pid (ipmi_sim) has bound UDP addr:port, reading
// its namespace's socket table: a probe would open a session, which the tests count.
func WaitListening(ctx context.Context, pid int, addr string, port int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)

	for {
		ok, err := udpBound(fmt.Sprintf("/proc/%d/net/udp", pid), addr, port)
		if ok {
			return nil
		}

		if !proc.Alive(pid) {
			return fmt.Errorf("ipmi_sim (pid %d) exited before it listened on %s:%d", pid, addr, port)
		}

		if time.Now().After(deadline) {
			return fmt.Errorf("ipmi_sim (pid %d) did not listen on %s:%d within %s: %v", pid, addr, port, timeout, err)
		}

		select {
		case <-ctx.Done():
			return ctx.Err()
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
	defer f.Close() //nolint:errcheck

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

// Client powers a machine through its simulated BMC, over RMCP+ with ipmitool, from
// inside the namespace where the BMC's LAN is; it has the method set the lab's power
// API serves (powerapi.Machine).
type Client struct {
	// NetNS is where Addr is reachable ("" for the caller's namespace).
	NetNS    string
	Addr     string
	Port     int
	User     string
	Password string
}

// callTimeout bounds one ipmitool call; a power-on waits for QEMU to start.
const callTimeout = 30 * time.Second

func (c *Client) run(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()

	// -C 3: the suite ipmi_sim serves; without it each call probes others for seconds.
	// -E: the password from the environment, not the command line others can read.
	base := []string{"-I", "lanplus", "-C", "3", "-H", c.Addr, "-p", strconv.Itoa(c.Port), "-U", c.User, "-E"}

	var cmd *exec.Cmd
	if c.NetNS != "" {
		cmd = labnet.Command(ctx, c.NetNS, "ipmitool", append(base, args...)...)
	} else {
		cmd = exec.CommandContext(ctx, "ipmitool", append(base, args...)...)
	}

	cmd.Env = append(os.Environ(), "IPMI_PASSWORD="+c.Password)

	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ipmitool %s against %s:%d: %w: %s", strings.Join(args, " "), c.Addr, c.Port, err, strings.TrimSpace(string(out)))
	}

	return string(out), nil
}

// PowerState reads the chassis power.
func (c *Client) PowerState(ctx context.Context) (on bool, err error) {
	out, err := c.run(ctx, "power", "status")
	if err != nil {
		return false, err
	}

	return strings.Contains(out, "is on"), nil
}

// Running reports whether the BMC says the machine is on (false when it cannot tell).
func (c *Client) Running() bool {
	on, err := c.PowerState(context.Background())

	return err == nil && on
}

// Start powers the machine on.
func (c *Client) Start(ctx context.Context) error {
	_, err := c.run(ctx, "power", "on")

	return err
}

// Stop powers the machine off.
func (c *Client) Stop(ctx context.Context) error {
	_, err := c.run(ctx, "power", "off")

	return err
}

// Reset presses the reset button.
func (c *Client) Reset(ctx context.Context) error {
	_, err := c.run(ctx, "power", "reset")

	return err
}

// SetNextBootNetwork sets (or clears) a one-time network boot.
func (c *Client) SetNextBootNetwork(on bool) error {
	dev := "none"
	if on {
		dev = "pxe"
	}

	_, err := c.run(context.Background(), "chassis", "bootdev", dev)

	return err
}
