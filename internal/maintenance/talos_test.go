package maintenance_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"testing"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/anvil-metal/anvil/internal/maintenance"
)

// standin records what a Talos-mode server was asked to do.
type standin struct {
	applied [][]byte
	resets  []*machine.ResetRequest
	fail    error
}

func startTalos(t *testing.T, talos *maintenance.Talos) *client.Client {
	t.Helper()

	ctx, cancel := context.WithCancel(t.Context())

	st, err := maintenance.NewState(ctx)
	require.NoError(t, err)

	srv, err := maintenance.New(ctx, st, maintenance.Options{Talos: talos, Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)

	done := make(chan error, 1)

	go func() { done <- srv.Serve(ctx, lis) }()

	c, err := client.New(ctx, client.WithEndpoints(lis.Addr().String()), client.WithTLSConfig(&tls.Config{InsecureSkipVerify: true}))
	require.NoError(t, err)

	t.Cleanup(func() {
		c.Close()
		cancel()
		assert.NoError(t, <-done)
	})

	return c
}

// TestTalosMaintenance: a Talos machine in maintenance reports its version, its stage
// and its schematic (Omni's conditions for applying a cluster's config), and takes a
// config; it cannot be reset.
func TestTalosMaintenance(t *testing.T) {
	t.Parallel()

	var s standin

	c := startTalos(t, &maintenance.Talos{
		Version: "v1.9.0", Schematic: "abc123", SchematicManifest: "customization: {}\n",
		Stage: runtimeres.MachineStageMaintenance,
		Apply: func(_ context.Context, b []byte) (machine.ApplyConfigurationRequest_Mode, error) {
			s.applied = append(s.applied, b)

			return machine.ApplyConfigurationRequest_STAGED, s.fail
		},
	})
	ctx := t.Context()

	v, err := c.Version(ctx)
	require.NoError(t, err)
	assert.Equal(t, "v1.9.0", v.GetMessages()[0].GetVersion().GetTag())
	assert.Empty(t, v.GetMessages()[0].GetPlatform().GetMode(), "Talos, not the agent")

	ms, err := safe.StateGetByID[*runtimeres.MachineStatus](ctx, c.COSI, runtimeres.MachineStatusID)
	require.NoError(t, err)
	assert.Equal(t, runtimeres.MachineStageMaintenance, ms.TypedSpec().Stage)

	exts, err := safe.StateListAll[*runtimeres.ExtensionStatus](ctx, c.COSI)
	require.NoError(t, err)
	require.Equal(t, 1, exts.Len())
	assert.Equal(t, maintenance.SchematicExtensionName, exts.Get(0).TypedSpec().Metadata.Name)
	assert.Equal(t, "abc123", exts.Get(0).TypedSpec().Metadata.Version)
	assert.Equal(t, "customization: {}\n", exts.Get(0).TypedSpec().Metadata.ExtraInfo)

	resp, err := c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: []byte("config"), Mode: machine.ApplyConfigurationRequest_AUTO})
	require.NoError(t, err)
	require.Len(t, resp.GetMessages(), 1, "Omni wants exactly one answer")
	assert.Equal(t, machine.ApplyConfigurationRequest_STAGED, resp.GetMessages()[0].GetMode())
	assert.Equal(t, [][]byte{[]byte("config")}, s.applied)

	_, err = c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{})
	assert.Equal(t, codes.InvalidArgument, status.Code(err), "an empty config: %v", err)

	s.fail = errors.New("bad document")
	_, err = c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: []byte("bad")})
	assert.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)

	_, err = c.MachineClient.Reset(ctx, &machine.ResetRequest{})
	assert.Equal(t, codes.Unimplemented, status.Code(err), "%v", err)
}

// TestTalosRunning: a running Talos is reset as Omni resets a cluster's machine: the
// state encryption key deleted (nothing to delete), etcd left (none runs), the reset.
func TestTalosRunning(t *testing.T) {
	t.Parallel()

	var s standin

	c := startTalos(t, &maintenance.Talos{
		Version: "v1.9.0", Schematic: "abc123", Stage: runtimeres.MachineStageRunning,
		// Any server TLS: an installed machine's mutual TLS is the stand-in's, tested
		// there.
		TLS: maintenance.MaintenanceTLS,
		Reset: func(_ context.Context, req *machine.ResetRequest) error {
			s.resets = append(s.resets, req)

			return nil
		},
	})
	ctx := t.Context()

	ms, err := safe.StateGetByID[*runtimeres.MachineStatus](ctx, c.COSI, runtimeres.MachineStatusID)
	require.NoError(t, err)
	assert.Equal(t, runtimeres.MachineStageRunning, ms.TypedSpec().Stage)

	err = c.MetaDelete(ctx, 0x0a)
	assert.Equal(t, codes.NotFound, status.Code(err), "Omni tolerates NotFound: %v", err)

	_, err = c.MachineClient.EtcdForfeitLeadership(ctx, &machine.EtcdForfeitLeadershipRequest{})
	require.NoError(t, err)

	_, err = c.MachineClient.EtcdLeaveCluster(ctx, &machine.EtcdLeaveClusterRequest{})
	require.NoError(t, err)

	req := &machine.ResetRequest{Graceful: true, Reboot: true, SystemPartitionsToWipe: []*machine.ResetPartitionSpec{{Label: "STATE", Wipe: true}}}
	require.NoError(t, c.ResetGeneric(ctx, req))
	require.Len(t, s.resets, 1)
	assert.True(t, s.resets[0].GetReboot())

	_, err = c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: []byte("config")})
	assert.Equal(t, codes.Unimplemented, status.Code(err), "no Apply given: %v", err)
}
