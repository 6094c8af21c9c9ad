// Package bmcsim gives a lab machine a simulated IPMI BMC: one OpenIPMI ipmi_sim per
// machine, serving RMCP+ on a LAN address of its own and, over its "codec VM" serial
// port, the guest's KCS interface (QEMU ipmi-bmc-extern + isa-ipmi-kcs), so that a user
// the agent creates in-guest logs in over the network. The BMC is the machine's only
// power owner: ipmi_sim runs a chassis control program (Chassis) for power, reset and
// the boot device, and the lab itself powers the machine through ipmi_sim (Client).
package bmcsim

import (
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
)

// Ports of a lab's simulated BMCs, by machine index, in the provider's namespace: the
// LAN on the bridge address, the VM serial port on loopback.
const (
	LANPortBase    = 62300
	SerialPortBase = 62600
	// SerialAddr is where ipmi_sim listens for its machine's QEMU.
	SerialAddr = "127.0.0.1"
)

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
	// Dir holds lan.conf, bmc.emu, chassis.sh, the state directory, the console FIFO
	// and the log.
	Dir string
	// GUID is the BMC's system GUID, 32 hex digits.
	GUID string
	// LANAddr and LANPort are where RMCP+ is served.
	LANAddr string
	LANPort int
	// SerialPort is the VM serial port, on SerialAddr, that the machine's QEMU dials.
	SerialPort int
	Users      []User
	// ChassisCommand is the argv ipmi_sim runs, with "get <param>" or "set <param>
	// <value>…" appended, for power, reset and the boot device (see Chassis).
	ChassisCommand []string
}

// Paths of the BMC's files.
func (c *Config) LANConf() string       { return filepath.Join(c.Dir, "lan.conf") }
func (c *Config) EmuFile() string       { return filepath.Join(c.Dir, "bmc.emu") }
func (c *Config) ChassisScript() string { return filepath.Join(c.Dir, "chassis.sh") }
func (c *Config) StateDir() string      { return filepath.Join(c.Dir, "state") }
func (c *Config) Console() string       { return filepath.Join(c.Dir, "console") }
func (c *Config) Log() string           { return filepath.Join(c.Dir, "ipmi_sim.log") }

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

	if c.Dir == "" {
		errs = append(errs, errors.New("no BMC directory"))
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

	if len(c.ChassisCommand) == 0 {
		errs = append(errs, errors.New("no chassis control command"))
	}

	for _, a := range c.ChassisCommand {
		if strings.ContainsAny(a, "'\n") {
			errs = append(errs, fmt.Errorf("chassis command argument %q has a single quote or newline", a))
		}
	}

	return errors.Join(errs...)
}

// LANConfText is ipmi_sim's lan.conf for c.
//
// The chassis control program, not startcmd, powers the machine: ipmi_sim (2.0.33)
// answers Set System Boot Options (PXE once, which the provider sets before every
// power-on) only through such a program, and once one is set it routes power through
// it too. The serial line stays: it is the guest's KCS interface, and it gives ipmi_sim
// the system interface (channel 15) that in-band user provisioning goes through.
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
	fmt.Fprintf(&b, "chassis_control \"%s\"\n", c.ChassisScript())

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
	quoted := make([]string, len(c.ChassisCommand))
	for i, a := range c.ChassisCommand {
		quoted[i] = "'" + a + "'"
	}

	return "#!/bin/sh\nexec " + strings.Join(quoted, " ") + " \"$@\"\n"
}

// Write writes the BMC's files (its state directory, with what ipmi_sim persisted, is
// kept) and the console FIFO ipmi_sim reads commands from.
func (c *Config) Write() error {
	if err := c.Validate(); err != nil {
		return fmt.Errorf("error in the config of BMC %s: %w", c.Name, err)
	}

	if err := os.MkdirAll(c.StateDir(), 0o755); err != nil {
		return fmt.Errorf("error creating %s: %w", c.StateDir(), err)
	}

	files := []struct {
		path, text string
		mode       os.FileMode
	}{
		// 0600: it holds the lab's admin password.
		{c.LANConf(), c.LANConfText(), 0o600},
		{c.EmuFile(), EmuText(), 0o644},
		{c.ChassisScript(), c.ChassisScriptText(), 0o755},
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
