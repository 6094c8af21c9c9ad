package ipmisim

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func validConfig(dir string) Config {
	return Config{
		Name: "bios-0", Dir: dir, GUID: "0123456789ABCDEF0123456789abcdef",
		LANAddr: "10.77.0.1", LANPort: 62300, SerialPort: 62600,
		Users: []User{
			{ID: 1, Name: "", Password: "", Privilege: "user"},
			{ID: 2, Enabled: true, Name: "admin", Password: "lab-pw", Privilege: "admin"},
		},
		ChassisCommand: []string{"/lab/bin/lab-power", "chassis", "--dir", "/lab dir", "--machine", "bios-0"},
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name    string
		change  func(*Config)
		wantErr string
	}{
		{"valid", func(*Config) {}, ""},
		{"quote in name", func(c *Config) { c.Name = `a"b` }, "quotes"},
		{"short GUID", func(c *Config) { c.GUID = "0123" }, "32 hex digits"},
		{"IPv6 LAN", func(c *Config) { c.LANAddr = "fd77::1" }, "not an IPv4"},
		{"port 0", func(c *Config) { c.LANPort = 0 }, "LAN port 0"},
		{"port too big", func(c *Config) { c.SerialPort = 70000 }, "serial port 70000"},
		{"same loopback port", func(c *Config) { c.LANAddr, c.SerialPort = SerialAddr, c.LANPort }, "both"},
		{"slot 0", func(c *Config) { c.Users[0].ID = 0 }, "not 1–63"},
		{"slot twice", func(c *Config) { c.Users[1].ID = 1 }, "declared twice"},
		{"long name", func(c *Config) { c.Users[1].Name = strings.Repeat("u", 17) }, "16 bytes"},
		{"long password", func(c *Config) { c.Users[1].Password = strings.Repeat("p", 17) }, "16 bytes"},
		{"quote in password", func(c *Config) { c.Users[1].Password = `p"w` }, "quotes"},
		{"bad privilege", func(c *Config) { c.Users[1].Privilege = "root" }, "privilege"},
		{"no chassis command", func(c *Config) { c.ChassisCommand = nil }, "nothing powers"},
		{"start command instead", func(c *Config) { c.ChassisCommand, c.StartCommand = nil, []string{"sleep", "600"} }, ""},
		{"both", func(c *Config) { c.StartCommand = []string{"sleep", "600"} }, "one power owner"},
		{"quote in chassis command", func(c *Config) { c.ChassisCommand[3] = "/it's" }, "single quote"},
		{"quote in start command", func(c *Config) { c.ChassisCommand, c.StartCommand = nil, []string{"it's"} }, "single quote"},
		{"quote in directory", func(c *Config) { c.Dir = `/lab/"m"` }, "directory"},
		{"no directory", func(c *Config) { c.Dir = "" }, "directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			c := validConfig("/lab/m/bmc")
			tc.change(&c)

			err := c.Validate()
			if tc.wantErr == "" {
				assert.NoError(t, err)
			} else {
				assert.ErrorContains(t, err, tc.wantErr)
			}
		})
	}
}

func TestLANConfText(t *testing.T) {
	t.Parallel()

	c := validConfig("/lab/m/bmc")
	text := c.LANConfText()

	for _, want := range []string{
		"name \"bios-0\"\n",
		"set_working_mc 0x20\n",
		"startlan 1\n  addr 10.77.0.1 62300\n  priv_limit admin\n",
		"  allowed_auths_admin none md2 md5 straight\n",
		"  guid 0123456789abcdef0123456789abcdef\nendlan\n",
		"serial 15 127.0.0.1 62600 codec VM\n",
		"chassis_control \"/lab/m/bmc/chassis.sh\"\n",
		"user 1 false \"\" \"\" user 10 none md2 md5 straight\n",
		"user 2 true \"admin\" \"lab-pw\" admin 10 none md2 md5 straight\n",
	} {
		assert.Contains(t, text, want)
	}

	// Power is the chassis program's: a startcmd would be a second way to start QEMU.
	assert.NotContains(t, text, "startcmd")
	assert.Equal(t, []string{"-c", "/lab/m/bmc/lan.conf", "-f", "/lab/m/bmc/bmc.emu", "-s", "/lab/m/bmc/state"}, c.Args())
	assert.NotContains(t, c.Args(), "-n", "without a console ipmi_sim logs no sessions")
}

func TestLANConfTextStartCommand(t *testing.T) {
	t.Parallel()

	c := validConfig("/t/bmc")
	c.ChassisCommand, c.StartCommand = nil, []string{"sleep", "600"}
	text := c.LANConfText()

	assert.Contains(t, text, "startcmd \"/t/bmc/start.sh\"\nstartnow false\npoweroff_wait 1\nkill_wait 1\n")
	assert.Contains(t, text, "serial 15 127.0.0.1 62600 codec VM\n", "the system interface, without which ipmi_sim refuses power control")
	assert.NotContains(t, text, "chassis_control")
}

func TestScriptTexts(t *testing.T) {
	t.Parallel()

	c := validConfig("/lab/m/bmc")
	assert.Equal(t, "#!/bin/sh\nexec '/lab/bin/lab-power' 'chassis' '--dir' '/lab dir' '--machine' 'bios-0' \"$@\"\n", c.ChassisScriptText())

	c.ChassisCommand, c.StartCommand = nil, []string{"/bin/sleep", "600"}
	assert.Equal(t, "#!/bin/sh\necho $$ > '/lab/m/bmc/machine.pid'\nexec '/bin/sleep' '600'\n", c.StartScriptText())
}

func TestWrite(t *testing.T) {
	t.Parallel()

	dir := filepath.Join(t.TempDir(), "bmc")
	c := validConfig(dir)
	require.NoError(t, c.Write())

	for path, mode := range map[string]os.FileMode{c.LANConf(): 0o600, c.EmuFile(): 0o644, c.ChassisScript(): 0o755} {
		st, err := os.Stat(path)
		require.NoError(t, err)
		assert.Equal(t, mode, st.Mode().Perm(), path)
	}

	b, err := os.ReadFile(c.EmuFile())
	require.NoError(t, err)
	assert.Contains(t, string(b), "mc_enable 0x20")

	st, err := os.Stat(c.StateDir())
	require.NoError(t, err)
	assert.True(t, st.IsDir())

	bad := validConfig(dir)
	bad.GUID = "x"
	assert.ErrorContains(t, bad.Write(), "GUID")

	// A start command's BMC has a start script and no chassis script.
	start := validConfig(filepath.Join(t.TempDir(), "bmc"))
	start.ChassisCommand, start.StartCommand = nil, []string{"sleep", "600"}
	require.NoError(t, start.Write())

	st, err = os.Stat(start.StartScript())
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o755), st.Mode().Perm())

	_, err = os.Stat(start.ChassisScript())
	assert.ErrorIs(t, err, os.ErrNotExist)
}

// TestStartScriptAndMachinePID runs the start script as ipmi_sim would: the machine's
// pid is where MachinePID reads it while it runs, and 0 once it is gone.
func TestStartScriptAndMachinePID(t *testing.T) {
	t.Parallel()

	c := validConfig(t.TempDir())
	c.ChassisCommand, c.StartCommand = nil, []string{"sleep", "300"}
	require.NoError(t, c.Write())
	assert.Zero(t, c.MachinePID(), "no machine before power on")

	cmd := exec.Command(c.StartScript())
	require.NoError(t, cmd.Start())

	t.Cleanup(func() {
		cmd.Process.Kill() //nolint:errcheck // the test's own sleep
		cmd.Wait()         //nolint:errcheck // killed
	})

	require.Eventually(t, func() bool { return c.MachinePID() == cmd.Process.Pid }, 10*time.Second, 10*time.Millisecond,
		"the script execs the machine: its pid is the script's")

	require.NoError(t, cmd.Process.Kill())
	cmd.Wait() //nolint:errcheck // killed
	assert.Zero(t, c.MachinePID(), "a machine that exited is none")

	require.NoError(t, os.WriteFile(c.MachinePIDFile(), []byte("not a pid\n"), 0o644))
	assert.Zero(t, c.MachinePID())
}

// TestFileChassis drives the file chassis program as ipmi_sim does.
func TestFileChassis(t *testing.T) {
	t.Parallel()

	dir := t.TempDir()
	argv, err := FileChassis(dir)
	require.NoError(t, err)

	run := func(args ...string) string {
		t.Helper()

		out, err := exec.Command(argv[0], append(argv[1:], args...)...).CombinedOutput()
		require.NoError(t, err, "%s", out)

		return string(out)
	}

	assert.Equal(t, "power:0\nboot:default\n", run("get", "power", "boot"))
	run("set", "boot", "pxe", "power", "1")
	assert.Equal(t, "power:1\nboot:pxe\n", run("get", "power", "boot"))

	b, err := os.ReadFile(FileChassisBoot(dir))
	require.NoError(t, err)
	assert.Equal(t, "pxe\n", string(b))

	b, err = os.ReadFile(ChassisLog(dir))
	require.NoError(t, err)
	assert.Equal(t, "get power boot\nset boot pxe power 1\nget power boot\n", string(b))

	_, err = exec.Command(argv[0], append(argv[1:], "poke")...).CombinedOutput()
	assert.Error(t, err, "an unknown operation fails")
}

func TestOpenConsoleNeverEnds(t *testing.T) {
	t.Parallel()

	c := validConfig(t.TempDir())

	f, err := c.OpenConsole()
	require.NoError(t, err)

	defer f.Close()

	st, err := os.Stat(c.Console())
	require.NoError(t, err)
	assert.Equal(t, os.ModeNamedPipe, st.Mode().Type())

	// Opening it again (the next lab up) reuses the FIFO.
	g, err := c.OpenConsole()
	require.NoError(t, err)
	require.NoError(t, g.Close())
}

func TestFindUDP(t *testing.T) {
	t.Parallel()

	table := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops
  123: 01004D0A:F36C 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 4242 2 0000000000000000 0
  124: 0100007F:0043 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 4243 2 0000000000000000 0
`

	for _, tc := range []struct {
		addr string
		port int
		want bool
	}{
		{"10.77.0.1", 62316, true},
		{"10.77.0.1", 62300, false},
		{"127.0.0.1", 67, true},
		{"10.77.0.2", 62316, false},
	} {
		got, err := findUDP(strings.NewReader(table), tc.addr, tc.port)
		require.NoError(t, err)
		assert.Equal(t, tc.want, got, "%s:%d", tc.addr, tc.port)
	}

	_, err := findUDP(strings.NewReader(table), "fd77::1", 1)
	assert.Error(t, err)
}

// fakeMachine records what the chassis program did to it.
type fakeMachine struct {
	running, netOnce bool
	calls            []string
	failStart        error
}

func (f *fakeMachine) Running() bool         { return f.running }
func (f *fakeMachine) NextBootNetwork() bool { return f.netOnce }

func (f *fakeMachine) Start(context.Context) error {
	f.calls = append(f.calls, "start")
	if f.failStart != nil {
		return f.failStart
	}

	f.running, f.netOnce = true, false

	return nil
}

func (f *fakeMachine) Stop(context.Context) error {
	f.calls = append(f.calls, "stop")
	f.running = false

	return nil
}

func (f *fakeMachine) Reset(context.Context) error {
	f.calls = append(f.calls, "reset")
	if !f.running {
		return errors.New("off")
	}

	return nil
}

func (f *fakeMachine) SetNextBootNetwork(on bool) error {
	f.calls = append(f.calls, "boot-net="+map[bool]string{true: "on", false: "off"}[on])
	f.netOnce = on

	return nil
}

func TestChassis(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name             string
		machine          fakeMachine
		args             []string
		wantOut, wantLog string
		wantCalls        []string
		wantErr          string
		wantRunning      bool
		wantNetOnce      bool
	}{
		{name: "get power off", args: []string{"get", "power"}, wantOut: "power:0\n"},
		{name: "get power on", machine: fakeMachine{running: true}, args: []string{"get", "power"}, wantOut: "power:1\n", wantRunning: true},
		{name: "get boot", machine: fakeMachine{netOnce: true}, args: []string{"get", "boot", "power"}, wantOut: "boot:pxe\npower:0\n", wantNetOnce: true},
		{name: "get unknown", args: []string{"get", "fan"}, wantErr: `no readable "fan"`},
		{name: "power on", args: []string{"set", "power", "1"}, wantCalls: []string{"start"}, wantLog: "chassis m: power on (QEMU started)\n", wantRunning: true},
		{name: "power on when on", machine: fakeMachine{running: true}, args: []string{"set", "power", "1"}, wantRunning: true},
		{name: "power off", machine: fakeMachine{running: true}, args: []string{"set", "power", "0"}, wantCalls: []string{"stop"}, wantLog: "chassis m: power off (QEMU stopped)\n"},
		{name: "power off when off", args: []string{"set", "power", "0"}},
		{name: "bad power value", args: []string{"set", "power", "2"}, wantErr: "not 0 or 1", wantLog: "chassis m: power 2 failed"},
		{name: "pxe then on", args: []string{"set", "boot", "pxe", "power", "1"}, wantCalls: []string{"boot-net=on", "start"}, wantRunning: true,
			wantLog: "chassis m: next boot from the network, once\nchassis m: power on (QEMU started)\n"},
		{name: "boot none", machine: fakeMachine{netOnce: true}, args: []string{"set", "boot", "none"}, wantCalls: []string{"boot-net=off"}, wantLog: "next boot as configured"},
		{name: "boot cdrom", args: []string{"set", "boot", "cdrom"}, wantErr: "not supported", wantLog: "chassis m: boot cdrom failed"},
		{name: "reset on", machine: fakeMachine{running: true}, args: []string{"set", "reset", "1"}, wantCalls: []string{"reset"}, wantLog: "chassis m: reset\n", wantRunning: true},
		{name: "reset off fails", args: []string{"set", "reset", "1"}, wantCalls: []string{"reset"}, wantErr: "setting reset to 1 on m: off", wantLog: "chassis m: reset 1 failed: off\n"},
		{name: "soft shutdown", machine: fakeMachine{running: true}, args: []string{"set", "shutdown", "1"}, wantCalls: []string{"stop"}, wantLog: "soft shutdown"},
		{name: "identify ignored", args: []string{"set", "identify", "15"}},
		{name: "start fails", machine: fakeMachine{failStart: errors.New("no qemu")}, args: []string{"set", "power", "1"}, wantCalls: []string{"start"}, wantErr: "no qemu", wantLog: "chassis m: power 1 failed: no qemu\n"},
		{name: "odd set", args: []string{"set", "power"}, wantErr: "pairs"},
		{name: "too short", args: []string{"get"}, wantErr: "usage"},
		{name: "unknown op", args: []string{"poke", "power"}, wantErr: `unknown chassis operation "poke"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			m := tc.machine

			var out, log bytes.Buffer

			err := Chassis(t.Context(), "m", &m, tc.args, &out, &log)
			if tc.wantErr == "" {
				require.NoError(t, err)
			} else {
				require.ErrorContains(t, err, tc.wantErr)
			}

			assert.Equal(t, tc.wantOut, out.String())
			assert.Contains(t, log.String(), tc.wantLog)

			if tc.wantLog == "" {
				assert.Empty(t, log.String())
			}

			assert.Equal(t, tc.wantCalls, m.calls)
			assert.Equal(t, tc.wantRunning, m.running, "running after")
			assert.Equal(t, tc.wantNetOnce, m.netOnce, "network boot pending after")
		})
	}
}
