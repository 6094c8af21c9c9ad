package omnilink_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	omniadapterv1 "github.com/anvil-metal/anvil/api/omniadapter/v1"
	"github.com/anvil-metal/anvil/provider/internal/omnilink"
	"github.com/anvil-metal/anvil/provider/internal/resources"
	"github.com/anvil-metal/anvil/provider/internal/transitions"
)

// TestMachines: what the adapter says of each machine becomes its OmniMachine over the
// real socket; malformed messages are refused and leave the last good view; a forgotten
// machine is gone and pending; the node unique token is never logged.
func TestMachines(t *testing.T) {
	t.Parallel()

	st, err := resources.Open(t.Context(), t.TempDir())
	require.NoError(t, err)

	t.Cleanup(func() { st.Close() })

	core, logs := observer.New(zap.DebugLevel)
	link := omnilink.New(omnilink.Options{Socket: filepath.Join(shortDir(t), "omni-adapter.sock"), State: st, Logger: zap.New(core)})
	client := serve(t, link)
	ctx := t.Context()

	const (
		id    = "4c4c4544-0000-1000-8000-000000000007"
		token = `{"Fingerprint":"abc","Token":"secret-token"}`
	)

	good := &omniadapterv1.OmniMachine{
		Id: id, Acceptance: omniadapterv1.OmniMachine_ACCEPTANCE_ACCEPTED, ClusterTalosVersion: "v1.9.0",
		Extensions: []string{"siderolabs/intel-ucode"}, ExtraKernelArgs: "console=ttyS0", PreferredPower: omniadapterv1.OmniMachine_POWER_ON,
		WipeId: "w1", InstallEventId: 3, RequestedRebootId: "r1", PowerOffRequestId: "p1", Cordoned: true, NodeUniqueToken: token,
	}

	_, err = client.ApplyMachine(ctx, &omniadapterv1.ApplyMachineRequest{Machine: good})
	require.NoError(t, err)

	want := resources.OmniMachineSpec{
		Acceptance: resources.AcceptanceAccepted, ClusterTalosVersion: "v1.9.0", Extensions: []string{"siderolabs/intel-ucode"},
		ExtraKernelArgs: "console=ttyS0", PreferredPower: resources.PowerOn, WipeID: "w1", InstallEventID: 3,
		RequestedRebootID: "r1", PowerOffRequestID: "p1", Cordoned: true, NodeUniqueToken: token,
	}

	om, err := safe.StateGetByID[*resources.OmniMachine](ctx, st, id)
	require.NoError(t, err)
	assert.Equal(t, want, *om.TypedSpec())

	for name, m := range map[string]*omniadapterv1.OmniMachine{
		"no machine":      nil,
		"no id":           {Acceptance: omniadapterv1.OmniMachine_ACCEPTANCE_ACCEPTED},
		"id with a space": {Id: "a b"},
		"acceptance":      {Id: id, Acceptance: 7},
		"power":           {Id: id, PreferredPower: 9},
		"wipe id":         {Id: id, WipeId: "a,b"},
		"long token":      {Id: id, NodeUniqueToken: strings.Repeat("t", 2000)},
	} {
		_, err := client.ApplyMachine(ctx, &omniadapterv1.ApplyMachineRequest{Machine: m})
		assert.Equal(t, codes.InvalidArgument, status.Code(err), "%s: %v", name, err)
	}

	om, err = safe.StateGetByID[*resources.OmniMachine](ctx, st, id)
	require.NoError(t, err)
	assert.Equal(t, want, *om.TypedSpec(), "refused messages leave the last view")

	_, err = client.ForgetMachine(ctx, &omniadapterv1.ForgetMachineRequest{Id: id})
	require.NoError(t, err)

	om, err = safe.StateGetByID[*resources.OmniMachine](ctx, st, id)
	require.NoError(t, err)
	assert.Equal(t, resources.OmniMachineSpec{Acceptance: resources.AcceptancePending, Gone: true}, *om.TypedSpec(),
		"forgotten: gone, pending, the token dropped")

	_, err = client.ForgetMachine(ctx, &omniadapterv1.ForgetMachineRequest{Id: "4c4c4544-0000-1000-8000-0000000000ff"})
	require.NoError(t, err, "forgetting a machine never reported is no error")

	_, err = safe.StateGetByID[*resources.OmniMachine](ctx, st, "4c4c4544-0000-1000-8000-0000000000ff")
	assert.True(t, state.IsNotFoundError(err), "and stores nothing: %v", err)

	_, err = client.ForgetMachine(ctx, &omniadapterv1.ForgetMachineRequest{Id: id})
	require.NoError(t, err, "forgetting twice is no error")

	for _, e := range logs.All() {
		for k, v := range e.ContextMap() {
			assert.NotContains(t, e.Message+k+strings.TrimSpace(toString(v)), "secret-token", "the token is never logged")
		}
	}

	assert.Positive(t, logs.FilterMessage("Omni's decisions for a machine").Len())
}

// TestMachinesWithoutState: a link that keeps no view says so.
func TestMachinesWithoutState(t *testing.T) {
	t.Parallel()

	client := serve(t, omnilink.New(omnilink.Options{Socket: filepath.Join(shortDir(t), "omni-adapter.sock"), Logger: zap.NewNop()}))

	_, err := client.ApplyMachine(t.Context(), &omniadapterv1.ApplyMachineRequest{Machine: &omniadapterv1.OmniMachine{Id: "m"}})
	assert.Equal(t, codes.Unavailable, status.Code(err))
}

// serve serves the link's API until the test ends and returns a client of it.
func serve(t *testing.T, link *omnilink.Link) omniadapterv1.OmniAdapterServiceClient {
	t.Helper()

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)

	go func() { done <- link.Serve(ctx) }()

	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})

	conn, err := grpc.NewClient("unix://"+link.Socket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)

	t.Cleanup(func() { conn.Close() })

	client := omniadapterv1.NewOmniAdapterServiceClient(conn)

	// The socket exists once Serve listens: wait for the first call to go through.
	require.Eventually(t, func() bool {
		_, err := client.SetJoinConfig(t.Context(), &omniadapterv1.SetJoinConfigRequest{KernelArgs: []string{"a=1"}})

		return err == nil
	}, 10*time.Second, 20*time.Millisecond)

	return client
}

func toString(v any) string {
	if s, ok := v.(string); ok {
		return s
	}

	return ""
}

// TestSetBMC: a BMC from Omni goes through the transitions as a user's; what is not a
// BMC is refused, its password in no error; a link without a BMC setter says so.
func TestSetBMC(t *testing.T) {
	t.Parallel()

	st, err := resources.Open(t.Context(), t.TempDir())
	require.NoError(t, err)

	t.Cleanup(func() { st.Close() })

	tr := transitions.New(st, transitions.Options{ManagedBy: "Omni at https://omni.test"})
	client := serve(t, omnilink.New(omnilink.Options{Socket: filepath.Join(shortDir(t), "omni-adapter.sock"), State: st, BMCs: tr}))
	ctx := t.Context()

	const id = "4c4c4544-0000-1000-8000-000000000009"

	ipmi := func(addr string) *omniadapterv1.SetBMCRequest {
		return &omniadapterv1.SetBMCRequest{Id: id, Bmc: &omniadapterv1.SetBMCRequest_Ipmi{Ipmi: &omniadapterv1.SetBMCRequest_IPMI{
			Address: addr, Port: 623, Username: "admin", Password: "pw-secret",
		}}}
	}

	_, err = client.SetBMC(ctx, ipmi("10.0.0.5"))
	require.NoError(t, err)

	cfg, err := safe.StateGetByID[*resources.BMCConfig](ctx, st, id)
	require.NoError(t, err)
	assert.Equal(t, resources.BMCSourceUser, cfg.TypedSpec().Source)

	for name, req := range map[string]*omniadapterv1.SetBMCRequest{
		"no BMC":      {Id: id},
		"bad address": ipmi("not an address\n"),
		"no id":       {Bmc: &omniadapterv1.SetBMCRequest_Api{Api: &omniadapterv1.SetBMCRequest_API{Address: "http://10.0.0.9"}}},
	} {
		_, err := client.SetBMC(ctx, req)
		assert.Equal(t, codes.InvalidArgument, status.Code(err), "%s: %v", name, err)
		assert.NotContains(t, fmt.Sprint(err), "pw-secret", name)
	}

	_, err = serve(t, omnilink.New(omnilink.Options{Socket: filepath.Join(shortDir(t), "omni-adapter.sock")})).SetBMC(ctx, ipmi("10.0.0.5"))
	assert.Equal(t, codes.Unavailable, status.Code(err))
}
