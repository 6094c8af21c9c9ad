package ipmisim

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/anvil-metal/anvil/internal/netns"
)

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

// Run runs ipmitool with args (e.g. "chassis", "bootparam", "get", "5") against the
// BMC and returns its output.
func (c *Client) Run(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()

	// -C 3: the suite ipmi_sim serves; without it each call probes others for seconds.
	// -E: the password from the environment, not the command line others can read.
	base := []string{"-I", "lanplus", "-C", "3", "-H", c.Addr, "-p", strconv.Itoa(c.Port), "-U", c.User, "-E"}

	cmd := netns.Command(ctx, c.NetNS, "ipmitool", append(base, args...)...)
	cmd.Env = append(os.Environ(), "IPMI_PASSWORD="+c.Password)

	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("error running ipmitool %s against %s:%d: %w: %s", strings.Join(args, " "), c.Addr, c.Port, err, strings.TrimSpace(string(out)))
	}

	return string(out), nil
}

// PowerState reads the chassis power.
func (c *Client) PowerState(ctx context.Context) (on bool, err error) {
	out, err := c.Run(ctx, "power", "status")
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
	_, err := c.Run(ctx, "power", "on")

	return err
}

// Stop powers the machine off.
func (c *Client) Stop(ctx context.Context) error {
	_, err := c.Run(ctx, "power", "off")

	return err
}

// Reset presses the reset button.
func (c *Client) Reset(ctx context.Context) error {
	_, err := c.Run(ctx, "power", "reset")

	return err
}

// SetNextBootNetwork sets (or clears) a one-time network boot.
func (c *Client) SetNextBootNetwork(on bool) error {
	dev := "none"
	if on {
		dev = "pxe"
	}

	_, err := c.Run(context.Background(), "chassis", "bootdev", dev)

	return err
}
