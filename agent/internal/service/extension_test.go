package service

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jsimonetti/rtnetlink/v2"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/anvil-metal/anvil/agent/internal/config"
	"github.com/anvil-metal/anvil/agent/internal/inventory"
	"github.com/anvil-metal/anvil/internal/testprovider"
)

// TestMain removes the provider binaries the tests built once they are done.
func TestMain(m *testing.M) { os.Exit(testprovider.Main(m)) }

const (
	extUUID = "4c4c4544-0000-1000-8000-0000000000e7"
	extMAC  = "52:54:00:00:00:e7"
)

func TestParseMode(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		in      string
		want    Mode
		wantErr string
	}{
		{"", ModeInitramfs, ""},
		{"initramfs", ModeInitramfs, ""},
		{"extension", ModeExtension, ""},
		{"talos", "", `unknown agent mode "talos"`},
	} {
		got, err := ParseMode(tc.in)
		if tc.wantErr != "" {
			assert.ErrorContains(t, err, tc.wantErr, tc.in)

			continue
		}

		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, got, tc.in)
	}
}

func TestCheckMode(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name    string
		opts    Options
		wantErr []string
	}{
		{"initramfs does it all", Options{Mode: ModeInitramfs, PID1: true, Modules: true, Network: true}, nil},
		{"extension alone", Options{Mode: ModeExtension}, nil},
		{
			"extension asked for Talos' duties", Options{Mode: ModeExtension, PID1: true, Modules: true, Network: true},
			[]string{"PID 1's duties", "loading kernel modules", "configuring the network"},
		},
	} {
		err := checkMode(tc.opts)
		if tc.wantErr == nil {
			assert.NoError(t, err, tc.name)

			continue
		}

		for _, want := range tc.wantErr {
			assert.ErrorContains(t, err, want, tc.name)
		}
	}
}

// dutyLog records which of the initramfs mode's duties were called.
type dutyLog struct {
	mu     sync.Mutex
	called []string
}

func (d *dutyLog) duties() *duties {
	record := func(name string) {
		d.mu.Lock()
		defer d.mu.Unlock()

		d.called = append(d.called, name)
	}

	return &duties{
		mount:        func(context.Context, *zap.Logger) { record("mount") },
		loadModules:  func(context.Context, *zap.Logger) { record("modules") },
		startNetwork: func(context.Context, *zap.Logger) { record("network") },
		joinOmni:     func(context.Context, *omniAgent) { record("omni") },
	}
}

func (d *dutyLog) list() []string {
	d.mu.Lock()
	defer d.mu.Unlock()

	return append([]string(nil), d.called...)
}

// fakeMachined is Talos' machined on its socket: it records what it was asked, and with
// which role.
type fakeMachined struct {
	machine.UnimplementedMachineServiceServer

	mu    sync.Mutex
	calls []string
}

func (m *fakeMachined) record(ctx context.Context, call string) {
	md, _ := metadata.FromIncomingContext(ctx)

	m.mu.Lock()
	defer m.mu.Unlock()

	m.calls = append(m.calls, call+" as "+strings.Join(md.Get(constants.APIAuthzRoleMetadataKey), ","))
}

func (m *fakeMachined) Reboot(ctx context.Context, req *machine.RebootRequest) (*machine.RebootResponse, error) {
	m.record(ctx, "reboot "+req.GetMode().String())

	return &machine.RebootResponse{}, nil
}

func (m *fakeMachined) Shutdown(ctx context.Context, _ *machine.ShutdownRequest) (*machine.ShutdownResponse, error) {
	m.record(ctx, "shutdown")

	return &machine.ShutdownResponse{}, nil
}

func (m *fakeMachined) list() []string {
	m.mu.Lock()
	defer m.mu.Unlock()

	return append([]string(nil), m.calls...)
}

// serveMachined serves a fake machined on a socket in a directory of its own.
func serveMachined(t *testing.T) (*fakeMachined, string) {
	t.Helper()

	socket := filepath.Join(t.TempDir(), "machine.sock")

	l, err := net.Listen("unix", socket)
	require.NoError(t, err)

	m := &fakeMachined{}
	srv := grpc.NewServer()
	machine.RegisterMachineServiceServer(srv, m)

	go srv.Serve(l) //nolint:errcheck // ends with Stop

	t.Cleanup(srv.Stop)

	return m, socket
}

// talosContainer is the machine as the agent sees it inside Talos' extension container:
// a sysfs with one disk, /dev with its image, and a procfs whose mountinfo has the
// container's overlay as root (no disk behind it).
func talosContainer(t *testing.T) inventory.Sources {
	t.Helper()

	sysfs, dev, proc := t.TempDir(), t.TempDir(), t.TempDir()

	disk := filepath.Join(sysfs, "block", "vda")
	require.NoError(t, os.MkdirAll(disk, 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(sysfs, "dev", "block"), 0o755))
	require.NoError(t, os.Symlink(disk, filepath.Join(sysfs, "dev", "block", "253:0")))

	for name, content := range map[string]string{"dev": "253:0", "size": "131072"} {
		require.NoError(t, os.WriteFile(filepath.Join(disk, name), []byte(content+"\n"), 0o644))
	}

	img, err := os.Create(filepath.Join(dev, "vda"))
	require.NoError(t, err)
	require.NoError(t, img.Truncate(64<<20))
	_, err = img.WriteAt([]byte(strings.Repeat("data", 1024)), 0)
	require.NoError(t, err)
	require.NoError(t, img.Close())

	for name, content := range map[string]string{
		"self/mountinfo":            "1 0 0:31 / / ro,relatime - overlay overlay rw,lowerdir=/usr/local/lib/containers/metal-agent\n",
		"sys/kernel/random/boot_id": "6f2d7c1e-3a0b-4b8e-9a51-0d6e1c2b7e01\n",
	} {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(proc, name)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(proc, name), []byte(content), 0o644))
	}

	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/siderolabs/go-smbios").Output()
	require.NoError(t, err)

	return inventory.Sources{
		SysfsRoot: sysfs, ProcRoot: proc, DevRoot: dev,
		SMBIOS:   inventory.SMBIOSFile(filepath.Join(strings.TrimSpace(string(out)), "smbios", "testdata", "Dell-PowerEdge-R630-Dual-Xeon.dmi")),
		Netlink:  func() (inventory.Netlink, error) { return noLinks{}, nil },
		Hostname: func() (string, error) { return "talos-agent", nil },
		Interval: 100 * time.Millisecond,
	}
}

// noLinks is a network namespace with nothing in it: under Talos the agent only reads it.
type noLinks struct{}

func (noLinks) Links() ([]rtnetlink.LinkMessage, error)        { return nil, nil }
func (noLinks) Addresses() ([]rtnetlink.AddressMessage, error) { return nil, nil }
func (noLinks) Routes() ([]rtnetlink.RouteMessage, error)      { return nil, nil }
func (noLinks) Close() error                                   { return nil }

// TestModeDuties runs the agent in each mode against a provider that is not there: the
// initramfs mode does its duties before it tries the provider, extension mode none.
func TestModeDuties(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		mode Mode
		opts Options
		want []string
	}{
		{ModeInitramfs, Options{PID1: true, Modules: true, Network: true}, []string{"mount", "modules", "network", "omni"}},
		{ModeExtension, Options{}, nil},
	} {
		t.Run(string(tc.mode), func(t *testing.T) {
			t.Parallel()

			var log dutyLog

			_, socket := serveMachined(t)

			opts := tc.opts
			opts.Mode, opts.duties, opts.MachinedSocket = tc.mode, log.duties(), socket
			opts.Sources, opts.Logger = talosContainer(t), zaptest.NewLogger(t)
			// Omni's join args on the cmdline: the initramfs mode joins, extension mode
			// leaves it to Talos.
			opts.Config = config.Config{
				Provider: "127.0.0.1:1", CAFingerprint: strings.Repeat("ab", 32), MachineID: extUUID, Token: "t",
				SideroLinkAPI: "grpc://127.0.0.1:2?jointoken=j",
			}

			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
			defer cancel()

			_ = Run(ctx, opts) // ends with ctx: no provider answers

			assert.ElementsMatch(t, tc.want, log.list())
		})
	}
}

// TestExtensionModeAndProvider runs the agent's extension mode against the real provider:
// it registers with its inventory, wipes the disk it is ordered to, reboots through
// machined when the machine is allocated, and never does what Talos does.
func TestExtensionModeAndProvider(t *testing.T) {
	t.Parallel()

	p := testprovider.New(t, true)
	p.Start()

	_, script := p.BootScript(extUUID, extMAC)
	cfg := config.FromCmdline(script[strings.Index(script, "kernel "):strings.Index(script, "\ninitrd")])
	require.NoError(t, cfg.Validate(), script)

	machined, socket := serveMachined(t)
	src := talosContainer(t)

	var log dutyLog

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)

	go func() {
		done <- Run(ctx, Options{
			Mode: ModeExtension, Config: cfg, Sources: src, MachinedSocket: socket,
			Logger: zaptest.NewLogger(t), duties: log.duties(),
		})
	}()

	t.Cleanup(func() {
		cancel()
		<-done //nolint:errcheck // ends with ctx
	})

	machineYAML := func() string {
		out, _ := p.Anvilctl("get", "machine", extUUID, "-o", "yaml") // not there yet: empty

		return out
	}

	// reported tells whether the provider received a result of the order (by its ID's
	// prefix) with that status, as its log says.
	reported := func(order, status string) bool {
		for line := range strings.Lines(p.Log()) {
			if strings.Contains(line, `"msg":"order result"`) && strings.Contains(line, `"order":"`+order) &&
				strings.Contains(line, `"status":"`+status+`"`) {
				return true
			}
		}

		return false
	}

	// Registered, with the inventory read from the container's sysfs and SMBIOS.
	p.WaitMachine(extUUID)
	require.Eventually(t, func() bool { return strings.Contains(machineYAML(), "PowerEdge R630") }, 30*time.Second, 100*time.Millisecond,
		"the inventory was not recorded: %s", machineYAML())

	// Accepted: the wipe order, carried out on the disk /dev has, and reported.
	p.MustAnvilctl("machine", "accept", extUUID)
	require.Eventually(t, func() bool { return reported("wipe-", "STATUS_DONE") }, 30*time.Second, 100*time.Millisecond,
		"the wipe was not reported")

	head := make([]byte, 16)
	f, err := os.Open(filepath.Join(src.DevRoot, "vda"))
	require.NoError(t, err)
	_, err = f.ReadAt(head, 0)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	assert.Equal(t, make([]byte, 16), head, "the disk was wiped")

	// Allocated: the machine reboots through Talos (after a kexec the agent refuses,
	// where the provider tries one first).
	p.MustAnvilctl("machine", "allocate", extUUID, "--talos-version", "v1.9.0")
	require.Eventually(t, func() bool { return len(machined.list()) > 0 }, 60*time.Second, 100*time.Millisecond, "no reboot asked of machined")
	assert.Equal(t, []string{"reboot POWERCYCLE as os:operator"}, machined.list())
	assert.False(t, reported("kexec-", "STATUS_DONE"), "a kexec was reported done under Talos")

	assert.Empty(t, log.list(), "extension mode did what Talos does")
}
