// Package ipmisim runs OpenIPMI's ipmi_sim as a simulated IPMI BMC, for the lab and for
// the IPMI backend's tests: its config (lan.conf, the emulator file), its power (a
// chassis control program, see Chassis, or a start command), starting it as a child the
// caller owns or as a daemon, and a client that speaks to it with ipmitool over RMCP+.
//
// In the lab each machine has one, serving RMCP+ on a LAN address of its own and, over
// its "codec VM" serial port, the guest's KCS interface (QEMU ipmi-bmc-extern +
// isa-ipmi-kcs), so that a user the agent creates in-guest logs in over the network. The
// BMC is then the machine's only power owner: ipmi_sim runs a chassis control program
// for power, reset and the boot device, and the lab itself powers the machine through
// ipmi_sim (Client).
package ipmisim

import (
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// SerialAddr is where ipmi_sim listens for its machine's QEMU (the VM serial port).
const SerialAddr = "127.0.0.1"

// User is a BMC user account as ipmi_sim's config declares it.
type User struct {
	// ID is the user slot, 1–63; slot 1 is the anonymous user on most BMCs.
	ID       int
	Enabled  bool
	Name     string
	Password string
	// Privilege is the highest the user may ask for: callback, user, operator or admin.
	Privilege string
}

// Config describes one simulated BMC.
type Config struct {
	// Name is the BMC's name (its machine's).
	Name string
	// Dir holds lan.conf, bmc.emu, chassis.sh or start.sh, the state directory, the
	// console FIFO and the log.
	Dir string
	// GUID is the BMC's system GUID, 32 hex digits.
	GUID string
	// LANAddr and LANPort are where RMCP+ is served.
	LANAddr string
	LANPort int
	// SerialPort is the VM serial port, on SerialAddr, that the machine's QEMU dials.
	// Without it ipmi_sim has no system interface (channel 15), which in-band user
	// provisioning goes through and without which it refuses chassis power control;
	// nothing needs to dial it.
	SerialPort int
	Users      []User

	// The machine's power, exactly one of the two (one power owner):
	//
	// ChassisCommand is the argv ipmi_sim runs, with "get <param>" or "set <param>
	// <value>…" appended, for power, reset and the boot device (see Chassis).
	ChassisCommand []string
	// StartCommand is the argv ipmi_sim runs as the machine on power on and kills on
	// power off (its pid: MachinePID). ipmi_sim (2.0.33) then refuses boot options,
	// which it answers only through a chassis control program.
	StartCommand []string
}

// Paths of the BMC's files.
func (c *Config) LANConf() string        { return filepath.Join(c.Dir, "lan.conf") }
func (c *Config) EmuFile() string        { return filepath.Join(c.Dir, "bmc.emu") }
func (c *Config) ChassisScript() string  { return filepath.Join(c.Dir, "chassis.sh") }
func (c *Config) StartScript() string    { return filepath.Join(c.Dir, "start.sh") }
func (c *Config) MachinePIDFile() string { return filepath.Join(c.Dir, "machine.pid") }
func (c *Config) StateDir() string       { return filepath.Join(c.Dir, "state") }
func (c *Config) Console() string        { return filepath.Join(c.Dir, "console") }
func (c *Config) Log() string            { return filepath.Join(c.Dir, "ipmi_sim.log") }

// SessionLine is what ipmi_sim logs (Log) when a LAN session opens.
const SessionLine = "Activate session: Session started"

// Args is ipmi_sim's command line (without the binary). It runs with a console (no -n):
// only then does it log sessions, which the lab's tests read.
func (c *Config) Args() []string {
	return []string{"-c", c.LANConf(), "-f", c.EmuFile(), "-s", c.StateDir()}
}

var privileges = map[string]bool{"callback": true, "user": true, "operator": true, "admin": true}

// Validate checks what ipmi_sim's config parser and IPMI itself would refuse, so a bad
// config fails here with a reason rather than in ipmi_sim's log.
func (c *Config) Validate() error {
	var errs []error

	if c.Name == "" || strings.ContainsAny(c.Name, "\"\\\n") {
		errs = append(errs, fmt.Errorf("BMC name %q is empty or has quotes, backslashes or newlines", c.Name))
	}

	if c.Dir == "" || strings.ContainsAny(c.Dir, "'\"\\\n") {
		errs = append(errs, fmt.Errorf("BMC directory %q is empty or has quotes, backslashes or newlines", c.Dir))
	}

	if b, err := hex.DecodeString(c.GUID); err != nil || len(b) != 16 {
		errs = append(errs, fmt.Errorf("GUID %q is not 32 hex digits", c.GUID))
	}

	if ip := net.ParseIP(c.LANAddr); ip == nil || ip.To4() == nil {
		errs = append(errs, fmt.Errorf("LAN address %q is not an IPv4 address", c.LANAddr))
	}

	for _, p := range []struct {
		what string
		port int
	}{{"LAN", c.LANPort}, {"serial", c.SerialPort}} {
		if p.port <= 0 || p.port > 65535 {
			errs = append(errs, fmt.Errorf("%s port %d is out of range", p.what, p.port))
		}
	}

	if c.LANPort == c.SerialPort && c.LANAddr == SerialAddr {
		errs = append(errs, fmt.Errorf("the LAN and serial ports are both %s:%d", SerialAddr, c.LANPort))
	}

	seen := map[int]bool{}

	for _, u := range c.Users {
		switch {
		case u.ID < 1 || u.ID > 63:
			errs = append(errs, fmt.Errorf("user %q: slot %d is not 1–63", u.Name, u.ID))
		case seen[u.ID]:
			errs = append(errs, fmt.Errorf("user slot %d is declared twice", u.ID))
		case len(u.Name) > 16:
			errs = append(errs, fmt.Errorf("user %q: IPMI user names have at most 16 bytes", u.Name))
		case len(u.Password) > 16:
			// IPMI 2.0 allows 20, but ipmi_sim (2.0.33) refuses logins with a 20-byte
			// password from its config; 16 is what every BMC takes.
			errs = append(errs, fmt.Errorf("user %q: passwords in the config have at most 16 bytes", u.Name))
		case strings.ContainsAny(u.Name+u.Password, "\"\\\n"):
			errs = append(errs, fmt.Errorf("user %q: quotes, backslashes and newlines cannot be written to lan.conf", u.Name))
		case !privileges[u.Privilege]:
			errs = append(errs, fmt.Errorf("user %q: privilege %q is not callback, user, operator or admin", u.Name, u.Privilege))
		}

		seen[u.ID] = true
	}

	switch {
	case len(c.ChassisCommand) == 0 && len(c.StartCommand) == 0:
		errs = append(errs, errors.New("no chassis control command and no start command: nothing powers the machine"))
	case len(c.ChassisCommand) > 0 && len(c.StartCommand) > 0:
		errs = append(errs, errors.New("both a chassis control command and a start command: a machine has one power owner"))
	}

	for _, a := range append(slices.Clone(c.ChassisCommand), c.StartCommand...) {
		if strings.ContainsAny(a, "'\n") {
			errs = append(errs, fmt.Errorf("command argument %q has a single quote or newline", a))
		}
	}

	return errors.Join(errs...)
}

// LANConfText is ipmi_sim's lan.conf for c.
//
// The lab powers its machines with a chassis control program, not startcmd: ipmi_sim
// (2.0.33) answers Set System Boot Options (PXE once, which the provider sets before
// every power-on) only through such a program, and once one is set it routes power
// through it too. The serial line stays either way: it is the guest's KCS interface,
// and it gives ipmi_sim the system interface (channel 15) that in-band user
// provisioning goes through.
func (c *Config) LANConfText() string {
	var b strings.Builder

	fmt.Fprintf(&b, "name \"%s\"\n", c.Name)
	b.WriteString("set_working_mc 0x20\n")
	b.WriteString("startlan 1\n")
	fmt.Fprintf(&b, "  addr %s %d\n", c.LANAddr, c.LANPort)
	b.WriteString("  priv_limit admin\n")

	for _, role := range []string{"callback", "user", "operator", "admin"} {
		fmt.Fprintf(&b, "  allowed_auths_%s none md2 md5 straight\n", role)
	}

	fmt.Fprintf(&b, "  guid %s\n", strings.ToLower(c.GUID))
	b.WriteString("endlan\n")
	fmt.Fprintf(&b, "serial 15 %s %d codec VM\n", SerialAddr, c.SerialPort)

	if len(c.ChassisCommand) > 0 {
		fmt.Fprintf(&b, "chassis_control \"%s\"\n", c.ChassisScript())
	} else {
		// Power on runs the start command, power off kills it: SIGTERM after a second,
		// SIGKILL a second later (the lab's and the tests' machines need no more).
		fmt.Fprintf(&b, "startcmd \"%s\"\nstartnow false\npoweroff_wait 1\nkill_wait 1\n", c.StartScript())
	}

	for _, u := range c.Users {
		fmt.Fprintf(&b, "user %d %t \"%s\" \"%s\" %s 10 none md2 md5 straight\n", u.ID, u.Enabled, u.Name, u.Password, u.Privilege)
	}

	return b.String()
}

// EmuText is the emulator command file: one BMC at IPMB 0x20 (IPMI 2.0, chassis
// device), persisting what is set at run time (the users the agent provisions).
func EmuText() string {
	return "mc_setbmc 0x20\n" +
		"mc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02 persist_sdr\n" +
		"mc_enable 0x20\n"
}

// ChassisScriptText runs ChassisCommand with ipmi_sim's arguments: ipmi_sim hands its
// program to the shell as one string, which a script of quoted words keeps intact.
func (c *Config) ChassisScriptText() string {
	return "#!/bin/sh\nexec " + quote(c.ChassisCommand) + " \"$@\"\n"
}

// StartScriptText runs StartCommand in place of the script, after writing its pid (the
// machine's) to MachinePIDFile.
func (c *Config) StartScriptText() string {
	return "#!/bin/sh\necho $$ > " + quote([]string{c.MachinePIDFile()}) + "\nexec " + quote(c.StartCommand) + "\n"
}

// quote quotes words for sh; Validate refuses single quotes in them.
func quote(words []string) string {
	quoted := make([]string, len(words))
	for i, a := range words {
		quoted[i] = "'" + a + "'"
	}

	return strings.Join(quoted, " ")
}

// Write writes the BMC's files; its state directory, with what ipmi_sim persisted, is
// kept.
func (c *Config) Write() error {
	if err := c.Validate(); err != nil {
		return fmt.Errorf("error in the config of BMC %s: %w", c.Name, err)
	}

	if err := os.MkdirAll(c.StateDir(), 0o755); err != nil {
		return fmt.Errorf("error creating %s: %w", c.StateDir(), err)
	}

	// The power program: a chassis control script or the start script.
	power, powerText := c.StartScript(), c.StartScriptText()
	if len(c.ChassisCommand) > 0 {
		power, powerText = c.ChassisScript(), c.ChassisScriptText()
	}

	files := []struct {
		path, text string
		mode       os.FileMode
	}{
		// 0600: it holds the lab's admin password.
		{c.LANConf(), c.LANConfText(), 0o600},
		{c.EmuFile(), EmuText(), 0o644},
		{power, powerText, 0o755},
	}

	for _, f := range files {
		if err := os.WriteFile(f.path, []byte(f.text), f.mode); err != nil {
			return fmt.Errorf("error writing %s: %w", f.path, err)
		}

		if err := os.Chmod(f.path, f.mode); err != nil {
			return fmt.Errorf("error setting the mode of %s: %w", f.path, err)
		}
	}

	return nil
}
