package agentapi_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	agentv1 "github.com/anvil-metal/anvil/api/agent/v1"
	"github.com/anvil-metal/anvil/internal/token"
	"github.com/anvil-metal/anvil/provider/internal/agentapi"
	"github.com/anvil-metal/anvil/provider/internal/controllers"
	"github.com/anvil-metal/anvil/provider/internal/lifecycle"
	"github.com/anvil-metal/anvil/provider/internal/machineview"
	"github.com/anvil-metal/anvil/provider/internal/pki"
	"github.com/anvil-metal/anvil/provider/internal/resources"
	"github.com/anvil-metal/anvil/provider/internal/tamper"
	"github.com/anvil-metal/anvil/provider/internal/tamper/tampertest"
)

const machineID = "4c4c4544-0000-1000-8000-000000000001"

type recorder struct {
	mu        sync.Mutex
	wiped     []string
	inventory []resources.MachineInventorySpec
	bmc       []agentapi.BMCReport
	kexec     []string
	// store, when set, gets the handoff written as MachineStatusController writes it.
	store *resources.Store
}

func (r *recorder) handoff(ctx context.Context, id, event string, change func(*resources.MachineStatusSpec)) error {
	r.mu.Lock()
	r.kexec = append(r.kexec, event)
	r.mu.Unlock()

	if r.store == nil {
		return nil
	}

	_, err := safe.StateUpdateWithConflicts(ctx, r.store, resources.NewMachineStatus(id).Metadata(), func(s *resources.MachineStatus) error {
		change(s.TypedSpec())

		return nil
	})

	return err
}

func (r *recorder) RecordKexecOrdered(ctx context.Context, id, alloc string) error {
	return r.handoff(ctx, id, "ordered "+alloc, func(s *resources.MachineStatusSpec) {
		s.Handoff = &resources.HandoffRecord{AllocationID: alloc, OrderedAt: time.Now()}
	})
}

func (r *recorder) RecordKexecLoaded(ctx context.Context, id, alloc string) error {
	return r.handoff(ctx, id, "loaded "+alloc, func(s *resources.MachineStatusSpec) { s.Handoff.LoadedAt = time.Now() })
}

func (r *recorder) RecordKexecFailed(ctx context.Context, id, alloc, why string) error {
	return r.handoff(ctx, id, "failed "+alloc+": "+why, func(s *resources.MachineStatusSpec) {
		s.Handoff = &resources.HandoffRecord{AllocationID: alloc, OrderedAt: time.Now(), Failure: why}
	})
}

func (r *recorder) events() []string {
	r.mu.Lock()
	defer r.mu.Unlock()

	return slices.Clone(r.kexec)
}

func (r *recorder) RecordWiped(_ context.Context, _ string, w resources.WipeRecord) error {
	r.mu.Lock()
	defer r.mu.Unlock()

	r.wiped = append(r.wiped, w.ID)

	return nil
}

func (r *recorder) RecordBMC(_ context.Context, _ string, report agentapi.BMCReport) error {
	r.mu.Lock()
	defer r.mu.Unlock()

	r.bmc = append(r.bmc, report)

	return nil
}

func (r *recorder) RecordInventory(_ context.Context, _ string, spec resources.MachineInventorySpec) error {
	r.mu.Lock()
	defer r.mu.Unlock()

	r.inventory = append(r.inventory, spec)

	return nil
}

type fixture struct {
	store  *resources.Store
	view   *machineview.View
	key    []byte
	client agentv1.AgentServiceClient
	rec    *recorder
	obs    chan controllers.PXEObservation
}

func newFixture(t *testing.T) *fixture { return newFixtureWith(t, nil) }

func newFixtureWith(t *testing.T, tweak func(*agentapi.Options)) *fixture {
	t.Helper()

	dir := t.TempDir()

	store, err := resources.Open(t.Context(), dir)
	require.NoError(t, err)
	t.Cleanup(func() { store.Close() })

	ca, err := pki.Load(dir)
	require.NoError(t, err)

	view := machineview.New()
	f := &fixture{store: store, view: view, key: store.Keys().TokenKey(), rec: &recorder{store: store}, obs: make(chan controllers.PXEObservation, 16)}

	srvTLS, err := ca.ServerTLS([]string{"127.0.0.1"})
	require.NoError(t, err)

	opts := agentapi.Options{
		View: view, TokenKey: f.key, Recorder: f.rec,
		Policy:       lifecycle.Policy{RejectedThen: lifecycle.RejectedReboot, Kexec: resources.KexecNever},
		Observations: f.obs,
		Logger:       zaptest.NewLogger(t),
	}

	if tweak != nil {
		tweak(&opts)
	}

	// After the tweak, which may set the view's fields that are set before Run (Current).
	ctx, cancel := context.WithCancel(context.Background())
	viewDone := make(chan error, 1)

	go func() { viewDone <- view.Run(ctx, store) }()

	<-view.Ready()

	srv := agentapi.New(opts).GRPCServer(grpc.Creds(credentials.NewTLS(srvTLS)))

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)

	go srv.Serve(lis) //nolint:errcheck // ends with Stop

	roots := x509.NewCertPool()
	roots.AddCert(mustParse(t, ca))

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12})))
	require.NoError(t, err)

	t.Cleanup(func() {
		conn.Close()
		srv.Stop()
		cancel()
		<-viewDone //nolint:errcheck // the view's end, not its error, is waited for
	})

	f.client = agentv1.NewAgentServiceClient(conn)

	return f
}

func mustParse(t *testing.T, ca *pki.Authority) *x509.Certificate {
	t.Helper()

	cert, err := ca.ServerCertificate([]string{"127.0.0.1"})
	require.NoError(t, err)

	parsed, err := x509.ParseCertificate(cert.Certificate[1])
	require.NoError(t, err)

	return parsed
}

func (f *fixture) hello(t *testing.T, tok string) (agentv1.AgentService_SessionClient, error) {
	t.Helper()

	stream, err := f.client.Session(t.Context())
	require.NoError(t, err)

	require.NoError(t, stream.Send(&agentv1.AgentMessage{Message: &agentv1.AgentMessage_Hello{Hello: &agentv1.Hello{
		MachineId: machineID, Token: tok, BootId: "b1", Macs: []string{"52:54:00:00:00:01"},
	}}}))

	msg, err := stream.Recv()
	if err != nil {
		return nil, err
	}

	require.NotNil(t, msg.GetWelcome())

	return stream, nil
}

// handled waits until the session handled what was sent before: it sends an inventory
// after it, the session's n-th, and waits for that to be recorded (messages are handled
// in order).
func (f *fixture) handled(t *testing.T, stream agentv1.AgentService_SessionClient, n int) {
	t.Helper()

	require.NoError(t, stream.Send(&agentv1.AgentMessage{Message: &agentv1.AgentMessage_Inventory{Inventory: &agentv1.Inventory{}}}))
	require.Eventually(t, func() bool {
		f.rec.mu.Lock()
		defer f.rec.mu.Unlock()

		return len(f.rec.inventory) == n
	}, 5*time.Second, time.Millisecond)
}

func nextOrder(t *testing.T, stream agentv1.AgentService_SessionClient) *agentv1.Order {
	t.Helper()

	msg, err := stream.Recv()
	require.NoError(t, err)
	require.NotNil(t, msg.GetOrder())

	return msg.GetOrder()
}

func TestSessionOrdersFollowState(t *testing.T) {
	t.Parallel()

	f := newFixture(t)
	ctx := t.Context()
	issued := time.Now()

	stream, err := f.hello(t, token.Sign(f.key, token.Claims{Kind: token.KindAgent, MachineID: machineID, Issued: issued}))
	require.NoError(t, err)

	assert.Equal(t, "hold-pending", nextOrder(t, stream).GetId(), "an unknown machine's agent holds")

	// The machine is accepted: a wipe is owed.
	require.NoError(t, f.store.Create(ctx, resources.NewMachine(machineID)))

	in := resources.NewMachineIntent(machineID)
	in.TypedSpec().Acceptance = resources.AcceptanceAccepted
	in.TypedSpec().WipeID = "w1"
	require.NoError(t, f.store.Create(ctx, in))

	o := nextOrder(t, stream)
	assert.Equal(t, "wipe-w1", o.GetId())
	assert.Equal(t, "w1", o.GetWipe().GetGenerationId())

	require.NoError(t, stream.Send(&agentv1.AgentMessage{Message: &agentv1.AgentMessage_Result{Result: &agentv1.OrderResult{
		OrderId: o.GetId(), Status: agentv1.OrderResult_STATUS_DONE, Wipe: &agentv1.WipeReport{GenerationId: "w1"},
	}}}))
	require.Eventually(t, func() bool {
		f.rec.mu.Lock()
		defer f.rec.mu.Unlock()

		return len(f.rec.wiped) == 1 && f.rec.wiped[0] == "w1"
	}, 5*time.Second, time.Millisecond)

	// An inventory is summarised and recorded.
	require.NoError(t, stream.Send(&agentv1.AgentMessage{Message: &agentv1.AgentMessage_Inventory{Inventory: &agentv1.Inventory{}}}))
	require.Eventually(t, func() bool {
		f.rec.mu.Lock()
		defer f.rec.mu.Unlock()

		return len(f.rec.inventory) == 1
	}, 5*time.Second, time.Millisecond)

	// Malformed inventory ends the session with a clear error.
	require.NoError(t, stream.Send(&agentv1.AgentMessage{Message: &agentv1.AgentMessage_Inventory{Inventory: &agentv1.Inventory{Resources: [][]byte{{0xff}}}}}))

	_, err = stream.Recv()
	assert.Equal(t, codes.InvalidArgument, status.Code(err))
}

// TestSessionReportsOnlyWhatWasOrdered: a session's reports change the machine's state
// only for an order outstanding. A BMC "provisioned" with no BMC order outstanding (the
// policy provisions none, the machine has its own BMC) would replace the machine's BMC and
// stop in-band provisioning for good: it is refused, as is a wipe report of a generation
// not owed, each a security event; a report sent again after it was recorded is ignored
// without one. Finding 5 of issue 28: any BMC result was recorded before.
func TestSessionReportsOnlyWhatWasOrdered(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name         string
		provisionBMC bool
		status       *resources.MachineStatusSpec
		report       *agentv1.OrderResult
		recorded     bool
		unsolicited  float64
	}{
		{
			name: "BMC owed", provisionBMC: true, recorded: true,
			report: &agentv1.OrderResult{OrderId: "bmc-provision", Status: agentv1.OrderResult_STATUS_DONE, Bmc: &agentv1.BMCInfo{Address: "10.0.0.5", Port: 623, User: "anvil", Password: "pw"}},
		},
		{
			name: "BMC failure owed", provisionBMC: true, recorded: true,
			report: &agentv1.OrderResult{OrderId: "bmc-provision", Status: agentv1.OrderResult_STATUS_FAILED, Message: "no /dev/ipmi0"},
		},
		{
			name: "BMC not provisioned by the policy", unsolicited: 1,
			report: &agentv1.OrderResult{OrderId: "bmc-provision", Status: agentv1.OrderResult_STATUS_DONE, Bmc: &agentv1.BMCInfo{Address: "10.6.6.6", Port: 623, User: "evil", Password: "pw"}},
		},
		{
			name: "BMC recorded already", provisionBMC: true, status: &resources.MachineStatusSpec{BMCOrder: "bmc-provision"},
			report: &agentv1.OrderResult{OrderId: "bmc-provision", Status: agentv1.OrderResult_STATUS_DONE, Bmc: &agentv1.BMCInfo{Address: "10.6.6.6"}},
		},
		{
			name: "wipe owed", recorded: true,
			report: &agentv1.OrderResult{OrderId: "wipe-w1", Status: agentv1.OrderResult_STATUS_DONE, Wipe: &agentv1.WipeReport{GenerationId: "w1"}},
		},
		{
			name: "wipe of another generation", unsolicited: 1,
			report: &agentv1.OrderResult{OrderId: "wipe-w9", Status: agentv1.OrderResult_STATUS_DONE, Wipe: &agentv1.WipeReport{GenerationId: "w9"}},
		},
		{
			name: "wipe while the BMC is owed first", provisionBMC: true, unsolicited: 1,
			report: &agentv1.OrderResult{OrderId: "wipe-w1", Status: agentv1.OrderResult_STATUS_DONE, Wipe: &agentv1.WipeReport{GenerationId: "w1"}},
		},
		{
			name: "wipe recorded already", status: &resources.MachineStatusSpec{WipedID: "w0"},
			report: &agentv1.OrderResult{OrderId: "wipe-w0", Status: agentv1.OrderResult_STATUS_DONE, Wipe: &agentv1.WipeReport{GenerationId: "w0"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			reg := prometheus.NewRegistry()
			f := newFixtureWith(t, func(o *agentapi.Options) {
				o.Policy.ProvisionBMC = tc.provisionBMC
				o.BMCPassword = func(string) string { return "pw" }
				o.Tamper = tamper.New(nil, nil, reg, zaptest.NewLogger(t))
			})
			ctx := t.Context()

			require.NoError(t, f.store.Create(ctx, resources.NewMachine(machineID)))

			in := resources.NewMachineIntent(machineID)
			in.TypedSpec().Acceptance = resources.AcceptanceAccepted
			in.TypedSpec().WipeID = "w1"
			require.NoError(t, f.store.Create(ctx, in))

			if tc.status != nil {
				st := resources.NewMachineStatus(machineID)
				*st.TypedSpec() = *tc.status
				require.NoError(t, f.store.Create(ctx, st))
			}

			require.Eventually(t, func() bool {
				e := f.view.Get(machineID)

				return e != nil && e.Intent != nil && (tc.status == nil || e.Status != nil)
			}, 5*time.Second, time.Millisecond)

			stream, err := f.hello(t, token.Sign(f.key, token.Claims{Kind: token.KindAgent, MachineID: machineID, Issued: time.Now()}))
			require.NoError(t, err)

			nextOrder(t, stream)
			require.NoError(t, stream.Send(&agentv1.AgentMessage{Message: &agentv1.AgentMessage_Result{Result: tc.report}}))
			f.handled(t, stream, 1)

			f.rec.mu.Lock()
			recorded := len(f.rec.bmc) + len(f.rec.wiped)
			f.rec.mu.Unlock()

			assert.Equal(t, tc.recorded, recorded == 1)
			assert.Equal(t, tc.unsolicited, tampertest.Count(t, reg, tamper.UnsolicitedReport))
		})
	}
}

func TestSessionRefusals(t *testing.T) {
	t.Parallel()

	f := newFixture(t)
	now := time.Now()

	// The machine's newest boot was issued now: an older token is superseded.
	m := resources.NewMachine(machineID)
	m.TypedSpec().AgentBootIssued = now
	require.NoError(t, f.store.Create(t.Context(), m))
	require.Eventually(t, func() bool { return f.view.Get(machineID) != nil }, 5*time.Second, time.Millisecond)

	for name, tok := range map[string]string{
		"forged":          token.Sign([]byte("another key, not the provider's!"), token.Claims{Kind: token.KindAgent, MachineID: machineID, Issued: now}),
		"another machine": token.Sign(f.key, token.Claims{Kind: token.KindAgent, MachineID: "other", Issued: now}),
		"metadata token":  token.Sign(f.key, token.Claims{Kind: token.KindMetadata, MachineID: machineID, Binding: "a1"}),
		"superseded":      token.Sign(f.key, token.Claims{Kind: token.KindAgent, MachineID: machineID, Issued: now.Add(-time.Minute)}),
		"garbage":         "v1.garbage",
		"no token":        "",
	} {
		_, err := f.hello(t, tok)
		assert.Equal(t, codes.Unauthenticated, status.Code(err), name)
		if tok != "" {
			assert.NotContains(t, status.Convert(err).Message(), tok, "%s: the token is not echoed", name)
		}
	}

	// The newest boot's token is accepted.
	_, err := f.hello(t, token.Sign(f.key, token.Claims{Kind: token.KindAgent, MachineID: machineID, Issued: now}))
	require.NoError(t, err)

	// A first message that is not a hello.
	stream, err := f.client.Session(t.Context())
	require.NoError(t, err)
	require.NoError(t, stream.Send(&agentv1.AgentMessage{Message: &agentv1.AgentMessage_Inventory{Inventory: &agentv1.Inventory{}}}))

	_, err = stream.Recv()
	assert.Equal(t, codes.InvalidArgument, status.Code(err))

	// An oversized message.
	stream, err = f.client.Session(t.Context())
	require.NoError(t, err)
	require.NoError(t, stream.Send(&agentv1.AgentMessage{Message: &agentv1.AgentMessage_Hello{Hello: &agentv1.Hello{
		MachineId: machineID, AgentVersion: string(make([]byte, agentapi.MaxMessageSize+1)),
	}}}))

	_, err = stream.Recv()
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))
}
