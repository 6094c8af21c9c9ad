package session_test

import (
	"context"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/siderolabs/talos/pkg/machinery/resources/hardware"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/anvil-metal/anvil/agent/internal/config"
	"github.com/anvil-metal/anvil/agent/internal/orders"
	"github.com/anvil-metal/anvil/agent/internal/session"
	agentv1 "github.com/anvil-metal/anvil/api/agent/v1"
	"github.com/anvil-metal/anvil/internal/resourcewire"
	"github.com/anvil-metal/anvil/internal/testprovider"
)

// TestMain removes the provider binaries the tests built once they are done.
func TestMain(m *testing.M) { os.Exit(testprovider.Main(m)) }

const (
	uuid = "4c4c4544-0000-1000-8000-0000000000c3"
	mac  = "52:54:00:00:00:c3"
)

// machine is what the orders did to the (imaginary) machine.
type machine struct {
	mu       sync.Mutex
	calls    []string
	wipeGate chan struct{}
}

func (m *machine) record(s string) {
	m.mu.Lock()
	defer m.mu.Unlock()

	m.calls = append(m.calls, s)
}

func (m *machine) did(s string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()

	for _, c := range m.calls {
		if c == s {
			return true
		}
	}

	return false
}

func (m *machine) Reboot(context.Context) error   { m.record("reboot"); return nil }   //nolint:nlreturn // a one-line fake
func (m *machine) PowerOff(context.Context) error { m.record("poweroff"); return nil } //nolint:nlreturn // a one-line fake
func (m *machine) LoadKexec(context.Context, *agentv1.Kexec) error {
	m.record("kexec")

	return nil
}

func (m *machine) JumpKexec(context.Context) error { return nil }

func (m *machine) Wipe(ctx context.Context, w *agentv1.Wipe) (*agentv1.WipeReport, error) {
	m.record("wipe started")

	select {
	case <-m.wipeGate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}

	m.record("wipe done")

	return &agentv1.WipeReport{GenerationId: w.GetGenerationId(), Disks: []*agentv1.DiskWipe{{Device: "vda", Method: "fast", Verified: "edges"}}}, nil
}

func (m *machine) GetBMC(context.Context) (*agentv1.BMCInfo, error) { return nil, nil } //nolint:nilnil // the fake has no BMC
func (m *machine) SetBMC(context.Context, *agentv1.SetBMC) (*agentv1.BMCInfo, error) {
	return nil, nil //nolint:nilnil // the fake has no BMC
}

func inventory(t *testing.T) func(context.Context) ([][]byte, <-chan struct{}, error) {
	t.Helper()

	sys := hardware.NewSystemInformation(hardware.SystemInformationID)
	sys.TypedSpec().Manufacturer = "Anvil Test Co"
	sys.TypedSpec().ProductName = "Anvil 1U"
	sys.TypedSpec().UUID = uuid

	encoded, err := resourcewire.Encode([]resource.Resource{sys})
	require.NoError(t, err)

	return func(context.Context) ([][]byte, <-chan struct{}, error) { return encoded, nil, nil }
}

// agentConfig is what the machine's agent boot script puts on the kernel cmdline.
func agentConfig(t *testing.T, p *testprovider.Provider) config.Config {
	t.Helper()

	_, script := p.BootScript(uuid, mac)
	cfg := config.FromCmdline(script[strings.Index(script, "kernel "):strings.Index(script, "\ninitrd")])
	require.NoError(t, cfg.Validate(), script)

	return cfg
}

// TestAgentAndProvider drives the agent's session against the real provider over TLS:
// register with the inventory, orders as the machine's state changes, an order that
// outlives a provider restart, forged and superseded tokens refused.
func TestAgentAndProvider(t *testing.T) {
	t.Parallel()

	p := testprovider.New(t, true)
	p.Start()

	cfg := agentConfig(t, p)
	m := &machine{wipeGate: make(chan struct{})}
	executor := orders.New(m, zaptest.NewLogger(t).Named("orders"))

	var registrations atomic.Int32

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)

	go func() {
		executor.Run(ctx)
		done <- nil
	}()

	go func() {
		done <- session.Run(ctx, session.Options{
			Config: cfg, BootID: "boot-1", AgentVersion: "test", MACs: func() []string { return []string{mac} },
			Inventory: inventory(t), Executor: executor, Logger: zaptest.NewLogger(t).Named("session"),
			OnRegistered: func() { registrations.Add(1) },
		})
	}()

	t.Cleanup(func() {
		cancel()
		<-done //nolint:errcheck // waits for the session's end
		<-done //nolint:errcheck // waits for the session's end
	})

	result := func(id string, status agentv1.OrderResult_Status) func() bool {
		return func() bool {
			for _, r := range executor.Results() {
				if r.GetOrderId() == id && r.GetStatus() == status {
					return true
				}
			}

			return false
		}
	}

	require.Eventually(t, func() bool { return registrations.Load() == 1 }, 30*time.Second, 10*time.Millisecond)
	require.Eventually(t, result("hold-pending", agentv1.OrderResult_STATUS_DONE), 30*time.Second, 10*time.Millisecond, "a pending machine's agent holds")

	p.WaitMachine(uuid)
	require.Eventually(t, func() bool {
		out, err := p.Anvilctl("get", "machine", uuid, "-o", "yaml")

		return err == nil && strings.Contains(out, "Anvil Test Co")
	}, 30*time.Second, 100*time.Millisecond, "the inventory was not recorded: %s", p.MustAnvilctl("get", "machine", uuid, "-o", "yaml"))

	// Accepted: a wipe is owed. The wipe starts, and the provider dies while it runs.
	p.MustAnvilctl("machine", "accept", uuid)
	require.Eventually(t, func() bool { return m.did("wipe started") }, 30*time.Second, 10*time.Millisecond)
	p.Kill()

	close(m.wipeGate)
	require.Eventually(t, func() bool { return m.did("wipe done") }, 30*time.Second, 10*time.Millisecond)

	// The provider comes back; the agent reconnects with the same token and reports the
	// wipe it finished meanwhile.
	p.Start()
	require.Eventually(t, func() bool { return registrations.Load() >= 2 }, 60*time.Second, 10*time.Millisecond, "the agent did not reconnect")
	require.Eventually(t, func() bool {
		out, err := p.Anvilctl("get", "machine", uuid, "-o", "yaml")

		return err == nil && strings.Contains(out, "lastWipe:") && strings.Contains(out, "verified: edges")
	}, 30*time.Second, 100*time.Millisecond, "the wipe was not recorded")

	// Allocated: the agent reboots the machine into its Talos boot.
	p.MustAnvilctl("machine", "allocate", uuid, "--talos-version", "v1.9.0")
	require.Eventually(t, func() bool { return m.did("reboot") }, 30*time.Second, 10*time.Millisecond)
	m.mu.Lock()
	assert.Equal(t, 1, strings.Count(strings.Join(m.calls, ","), "wipe started"), "the wipe ran once")
	m.mu.Unlock()

	// Another agent with a forged token, then with the token of a boot since superseded.
	// The forgery changes a character inside the signature (the last one carries bits
	// the decoder ignores, and any fixed ending may be the token's own).
	forged := cfg
	b := []byte(cfg.Token)
	if i := len(b) - 10; b[i] == 'A' {
		b[i] = 'B'
	} else {
		b[i] = 'A'
	}
	forged.Token = string(b)

	// Deallocated, the machine PXE-boots into the agent again: the newer boot's token
	// supersedes cfg's.
	stale := cfg

	p.MustAnvilctl("machine", "deallocate", uuid)
	agentConfig(t, p)

	for _, c := range []config.Config{forged, stale} {
		sctx, scancel := context.WithTimeout(ctx, 3*time.Second)
		go session.Run(sctx, session.Options{Config: c, Executor: orders.New(m, zaptest.NewLogger(t)), Logger: zaptest.NewLogger(t)}) //nolint:errcheck // refused, or ended by the timeout
		<-sctx.Done()
		scancel()
	}

	require.Eventually(t, func() bool {
		log := p.Log()

		return strings.Contains(log, "agent refused: invalid token") && strings.Contains(log, "agent refused: token superseded")
	}, 30*time.Second, 100*time.Millisecond)
	assert.NotContains(t, p.Log(), cfg.Token, "tokens never appear in the provider's log")
}
