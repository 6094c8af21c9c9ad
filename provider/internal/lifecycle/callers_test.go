package lifecycle_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/controller/runtime"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	agentv1 "github.com/anvil-metal/anvil/api/agent/v1"
	"github.com/anvil-metal/anvil/internal/token"
	"github.com/anvil-metal/anvil/provider/internal/agentapi"
	"github.com/anvil-metal/anvil/provider/internal/boot"
	"github.com/anvil-metal/anvil/provider/internal/controllers"
	"github.com/anvil-metal/anvil/provider/internal/httpapi"
	"github.com/anvil-metal/anvil/provider/internal/lifecycle"
	"github.com/anvil-metal/anvil/provider/internal/machineview"
	"github.com/anvil-metal/anvil/provider/internal/pki"
	"github.com/anvil-metal/anvil/provider/internal/power"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// TestDesignTableCallers sends every row of the design table through the parts of the
// provider that act on it — the iPXE handler, the agent order stream, the power
// controller — each as the provider runs it, over one real store: they must all say
// what the rules say.
func TestDesignTableCallers(t *testing.T) {
	t.Parallel()

	f := newCallers(t)

	for i, r := range designTable {
		f.store(t, rowID(i), r)
	}

	f.waitView(t)

	// The agents first: a boot script served later supersedes their tokens.
	t.Run("agent orders", func(t *testing.T) {
		for i, r := range designTable {
			assert.Equal(t, r.order, f.firstOrder(t, rowID(i), r.status), r.name)
		}
	})

	t.Run("boot scripts", func(t *testing.T) {
		for i, r := range designTable {
			assert.Equal(t, r.boot, f.bootScript(t, rowID(i)), r.name)
		}
	})

	t.Run("power", func(t *testing.T) {
		for i, r := range designTable {
			id := rowID(i)

			if r.bmc == nil {
				continue
			}

			require.Eventually(t, func() bool {
				ps, err := safe.StateGetByID[*resources.PowerStatus](t.Context(), f.st, id)

				return err == nil && ps.TypedSpec().Desired == r.power && ps.TypedSpec().Condition != ""
			}, 10*time.Second, 5*time.Millisecond, "%s: desired power %q", r.name, r.power)
		}

		for i, r := range designTable {
			called := f.bmcs.called(rowID(i))

			if r.power == "" {
				assert.False(t, called, "%s: a machine the provider keeps off has its BMC never called", r.name)
			} else {
				assert.True(t, called, "%s: the BMC is read", r.name)
			}
		}
	})
}

// callers are the provider's parts, wired as the service wires them.
type callers struct {
	st     *resources.Store
	view   *machineview.View
	http   *httpapi.Server
	agents agentv1.AgentServiceClient
	key    []byte
	bmcs   *bmcLog
	// factoryURL is the Image Factory's PXE endpoint Talos boots from.
	factoryURL string
}

func newCallers(t *testing.T) *callers {
	t.Helper()

	dir := t.TempDir()

	st, err := resources.Open(t.Context(), dir)
	require.NoError(t, err)

	f := &callers{st: st, view: machineview.New(), key: st.Keys().TokenKey(), bmcs: &bmcLog{calls: map[string]int{}}}

	ctx, cancel := context.WithCancel(context.Background())

	var wg sync.WaitGroup

	wg.Go(func() { f.view.Run(ctx, st) }) //nolint:errcheck // returns nil when ctx ends

	// The power controller, in the controller runtime.
	rt, err := runtime.NewRuntime(st, zaptest.NewLogger(t).Named("runtime"))
	require.NoError(t, err)
	require.NoError(t, rt.RegisterQController(&controllers.PowerController{
		Dialers: power.Dialers{power.BackendIPMI: f.bmcs.dial}, Policy: policy, Timeout: time.Second,
	}))

	wg.Go(func() { rt.Run(ctx) }) //nolint:errcheck // returns nil when ctx ends

	// The iPXE handler.
	assets := t.TempDir()
	for name, content := range map[string]string{"vmlinuz-amd64": "KERNEL", "initramfs-amd64.xz": "INITRAMFS"} {
		require.NoError(t, os.WriteFile(filepath.Join(assets, name), []byte(content), 0o600))
	}

	set, err := boot.LoadAgentAssets(assets)
	require.NoError(t, err)

	// The Image Factory's PXE endpoint: the cmdline of a Talos boot without a cache.
	factory := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("talos.platform=metal"))
	}))
	t.Cleanup(factory.Close)

	f.factoryURL = factory.URL
	f.http = httpapi.New(httpapi.Options{
		State: st, View: f.view, Policy: policy,
		Scripts: &boot.Scripts{
			BaseURL: "http://10.77.0.1:50042", APIEndpoint: "10.77.0.1:50042", FactoryPXEBaseURL: factory.URL,
			Platform: "metal", DiskMethod: boot.DiskIPXEExit, Assets: set, TokenKey: f.key,
		},
		Observations: make(chan controllers.PXEObservation, 64),
		Registry:     prometheus.NewRegistry(), Logger: zaptest.NewLogger(t).Named("http"),
	})

	// The agent API, over TLS as agents dial it.
	ca, err := pki.Load(dir)
	require.NoError(t, err)

	srvTLS, err := ca.ServerTLS([]string{"127.0.0.1"})
	require.NoError(t, err)

	srv := agentapi.New(agentapi.Options{
		View: f.view, TokenKey: f.key, Policy: policy, Recorder: nopRecorder{}, Kexec: kexecTargets{},
		BMCPassword:  func(string) string { return "derived" },
		Observations: make(chan controllers.PXEObservation, 64),
		Logger:       zaptest.NewLogger(t).Named("agents"),
	}).GRPCServer(grpc.Creds(credentials.NewTLS(srvTLS)))

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)

	wg.Go(func() { srv.Serve(lis) }) //nolint:errcheck // ends with Stop

	cert, err := ca.ServerCertificate([]string{"127.0.0.1"})
	require.NoError(t, err)

	root, err := x509.ParseCertificate(cert.Certificate[1])
	require.NoError(t, err)

	roots := x509.NewCertPool()
	roots.AddCert(root)

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12})))
	require.NoError(t, err)

	f.agents = agentv1.NewAgentServiceClient(conn)

	t.Cleanup(func() {
		conn.Close()
		srv.Stop()
		cancel()
		wg.Wait()
		require.NoError(t, st.Close())
	})

	return f
}

// store writes the row's resources for machine id.
func (f *callers) store(t *testing.T, id string, r row) {
	t.Helper()

	ctx := t.Context()

	if r.known {
		m := resources.NewMachine(id)
		m.TypedSpec().UUID = id
		require.NoError(t, f.st.Create(ctx, m))
	}

	if r.intent != nil {
		in := resources.NewMachineIntent(id)
		*in.TypedSpec() = *r.intent
		require.NoError(t, f.st.Create(ctx, in))
	}

	if r.status != nil {
		s := resources.NewMachineStatus(id)
		*s.TypedSpec() = *r.status
		require.NoError(t, f.st.Create(ctx, s))
	}

	if r.bmc != nil {
		b := resources.NewBMCConfig(id)
		*b.TypedSpec() = *r.bmc
		require.NoError(t, f.st.Create(ctx, b))

		secret := resources.NewBMCSecret(id)
		secret.TypedSpec().Password = "pw"
		require.NoError(t, f.st.Create(ctx, secret))
	}
}

// waitView waits until the boot services' view holds every row.
func (f *callers) waitView(t *testing.T) {
	t.Helper()

	require.Eventually(t, func() bool {
		for i, r := range designTable {
			e := f.view.Get(rowID(i))
			if r.known && (e == nil || e.Machine == nil || (r.intent != nil) != (e.Intent != nil) ||
				(r.status != nil) != (e.Status != nil) || (r.bmc != nil) != (e.BMC != nil)) {
				return false
			}
		}

		return true
	}, 10*time.Second, 5*time.Millisecond)
}

// firstOrder opens an agent session for the machine and returns the order it gets.
func (f *callers) firstOrder(t *testing.T, id string, status *resources.MachineStatusSpec) string {
	t.Helper()

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	stream, err := f.agents.Session(ctx)
	require.NoError(t, err)

	// The agent says whether it can kexec, as the row's status recorded it from its hello.
	var kexecUnavailable string
	if status != nil {
		kexecUnavailable = status.AgentKexecUnavailable
	}

	require.NoError(t, stream.Send(&agentv1.AgentMessage{Message: &agentv1.AgentMessage_Hello{Hello: &agentv1.Hello{
		MachineId: id, BootId: "b1", Token: token.Sign(f.key, token.Claims{Kind: token.KindAgent, MachineID: id, Issued: time.Now()}),
		KexecUnavailable: kexecUnavailable,
	}}}))

	for {
		msg, err := stream.Recv()
		require.NoError(t, err)

		if o := msg.GetOrder(); o != nil {
			return o.GetId()
		}
	}
}

// bootScript fetches the machine's boot script from the iPXE handler and says what it
// boots.
func (f *callers) bootScript(t *testing.T, id string) lifecycle.Boot {
	t.Helper()

	rec := httptest.NewRecorder()
	f.http.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet,
		"/ipxe/boot.ipxe?uuid="+id+"&mac=52-54-00-00-00-01&arch=x86_64&platform=pcbios", nil))

	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())

	switch body := rec.Body.String(); {
	case strings.Contains(body, "/assets/agent/") && strings.Contains(body, "anvil.token="):
		return lifecycle.BootAgent
	case strings.Contains(body, "kernel "+f.factoryURL+"/image/"):
		return lifecycle.BootTalos
	case strings.Contains(body, "booting from disk"):
		return lifecycle.BootDisk
	default:
		t.Fatalf("unrecognised boot script:\n%s", body)

		return ""
	}
}

// bmcLog is every machine's BMC, in memory, counting the calls.
type bmcLog struct {
	mu    sync.Mutex
	calls map[string]int
	on    []string
}

func (b *bmcLog) dial(_ context.Context, ep power.Endpoint) (power.Client, error) {
	b.mu.Lock()
	defer b.mu.Unlock()

	b.calls[ep.MachineUUID]++

	return &fakeBMC{log: b, id: ep.MachineUUID}, nil
}

func (b *bmcLog) called(id string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()

	return b.calls[id] > 0
}

type fakeBMC struct {
	log *bmcLog
	id  string
}

func (c *fakeBMC) PowerState(context.Context) (bool, error) {
	c.log.mu.Lock()
	defer c.log.mu.Unlock()

	if slices.Contains(c.log.on, c.id) {
		return true, nil
	}

	return false, nil
}

func (c *fakeBMC) PowerOn(context.Context) error {
	c.log.mu.Lock()
	defer c.log.mu.Unlock()

	c.log.on = append(c.log.on, c.id)

	return nil
}

func (c *fakeBMC) PowerOff(context.Context) error {
	c.log.mu.Lock()
	defer c.log.mu.Unlock()

	c.log.on = slices.DeleteFunc(c.log.on, func(id string) bool { return id == c.id })

	return nil
}

func (c *fakeBMC) PowerCycle(ctx context.Context) error             { return c.PowerOn(ctx) }
func (c *fakeBMC) SetPXEOnce(context.Context, power.BootMode) error { return nil }
func (c *fakeBMC) Close() error                                     { return nil }

type nopRecorder struct{}

func (nopRecorder) RecordWiped(context.Context, string, resources.WipeRecord) error { return nil }
func (nopRecorder) RecordInventory(context.Context, string, resources.MachineInventorySpec) error {
	return nil
}
func (nopRecorder) RecordBMC(context.Context, string, agentapi.BMCReport) error { return nil }
func (nopRecorder) RecordKexecOrdered(context.Context, string, string) error    { return nil }
func (nopRecorder) RecordKexecLoaded(context.Context, string, string) error     { return nil }
func (nopRecorder) RecordKexecFailed(context.Context, string, string, string) error {
	return nil
}

// kexecTargets are ready at once.
type kexecTargets struct{}

func (kexecTargets) KexecTarget(context.Context, string, string, *resources.Allocation) (*agentv1.Kexec, error) {
	return &agentv1.Kexec{KernelUrl: "http://10.77.0.1:50042/assets/talos/k"}, nil
}
