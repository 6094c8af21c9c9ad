package maintenance_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/anvil-metal/anvil/internal/maintenance"
)

// standin records what a Talos-mode server was asked to do.
type standin struct {
	applied [][]byte
	modes   []machine.ApplyConfigurationRequest_Mode
	resets  []*machine.ResetRequest
	actors  []string
	fail    error
}

// sinkConfig is a config of one document and no machine config, as Omni applies in
// maintenance.
const sinkConfig = "apiVersion: v1alpha1\nkind: EventSinkConfig\nendpoint: '[fdae:41e4:649b:9303::1]:8091'\n"

func startTalos(t *testing.T, talos *maintenance.Talos) *client.Client {
	t.Helper()

	return startTalosLogged(t, talos, zaptest.NewLogger(t))
}

// startTalosLogged is startTalos with the server's logger.
func startTalosLogged(t *testing.T, talos *maintenance.Talos, logger *zap.Logger) *client.Client {
	t.Helper()

	ctx, cancel := context.WithCancel(t.Context())

	st, err := maintenance.NewState(ctx)
	require.NoError(t, err)

	srv, err := maintenance.New(ctx, st, maintenance.Options{Talos: talos, Logger: logger})
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
		Apply: func(_ context.Context, b []byte, mode machine.ApplyConfigurationRequest_Mode) error {
			s.applied = append(s.applied, b)
			s.modes = append(s.modes, mode)

			return s.fail
		},
	})
	ctx := t.Context()

	v, err := c.Version(ctx)
	require.NoError(t, err)
	assert.Equal(t, "v1.9.0", v.GetMessages()[0].GetVersion().GetTag())
	assert.Equal(t, "metal", v.GetMessages()[0].GetPlatform().GetMode(), "Talos, not the agent")
	assert.Nil(t, v.GetMessages()[0].GetFeatures(), "no machine config yet")

	ms, err := safe.StateGetByID[*runtimeres.MachineStatus](ctx, c.COSI, runtimeres.MachineStatusID)
	require.NoError(t, err)
	assert.Equal(t, runtimeres.MachineStageMaintenance, ms.TypedSpec().Stage)

	exts, err := safe.StateListAll[*runtimeres.ExtensionStatus](ctx, c.COSI)
	require.NoError(t, err)
	require.Equal(t, 1, exts.Len())
	assert.Equal(t, maintenance.SchematicExtensionName, exts.Get(0).TypedSpec().Metadata.Name)
	assert.Equal(t, "abc123", exts.Get(0).TypedSpec().Metadata.Version)
	assert.Equal(t, "customization: {}\n", exts.Get(0).TypedSpec().Metadata.ExtraInfo)

	// In maintenance AUTO and REBOOT apply without a reboot, STAGED stages.
	for asked, want := range map[machine.ApplyConfigurationRequest_Mode]machine.ApplyConfigurationRequest_Mode{
		machine.ApplyConfigurationRequest_AUTO:   machine.ApplyConfigurationRequest_NO_REBOOT,
		machine.ApplyConfigurationRequest_REBOOT: machine.ApplyConfigurationRequest_NO_REBOOT, //nolint:staticcheck // deprecated, still taken
		machine.ApplyConfigurationRequest_STAGED: machine.ApplyConfigurationRequest_STAGED,
	} {
		resp, err := c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: []byte(sinkConfig), Mode: asked})
		require.NoError(t, err, asked)
		require.Len(t, resp.GetMessages(), 1, "Omni wants exactly one answer")
		assert.Equal(t, want, resp.GetMessages()[0].GetMode(), asked)
		assert.Equal(t, want, s.modes[len(s.modes)-1], asked)
	}

	assert.Equal(t, []byte(sinkConfig), s.applied[0])

	for name, data := range map[string]string{"empty": "", "not YAML": "{{{", "no install disk": "version: v1alpha1\nmachine:\n  type: worker\n"} {
		_, err = c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: []byte(data)})
		assert.Equal(t, codes.InvalidArgument, status.Code(err), "%s: %v", name, err)
	}

	assert.Len(t, s.applied, 3, "no bad config applied")

	s.fail = errors.New("disk full")
	_, err = c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: []byte(sinkConfig)})
	assert.Equal(t, codes.Internal, status.Code(err), "%v", err)

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
		Reset: func(_ context.Context, req *machine.ResetRequest, actor string) error {
			s.resets = append(s.resets, req)
			s.actors = append(s.actors, actor)

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
	resp, err := c.MachineClient.Reset(ctx, req)
	require.NoError(t, err)
	require.Len(t, s.resets, 1)
	assert.True(t, s.resets[0].GetReboot())
	require.Len(t, resp.GetMessages(), 1)
	assert.NotEmpty(t, resp.GetMessages()[0].GetActorId(), "the reset is an actor")
	assert.Equal(t, resp.GetMessages()[0].GetActorId(), s.actors[0], "the reset's events name its actor")

	v, err := c.Version(ctx)
	require.NoError(t, err)
	assert.True(t, v.GetMessages()[0].GetFeatures().GetRbac(), "running on a machine config")

	_, err = c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: []byte("config")})
	assert.Equal(t, codes.Unimplemented, status.Code(err), "no Apply given: %v", err)
}

// TestTalosApplyErrorNotLogged: a refused config's error quotes it (an unknown key and
// its value); the caller gets it, the log does not.
func TestTalosApplyErrorNotLogged(t *testing.T) {
	t.Parallel()

	core, logs := observer.New(zap.DebugLevel)
	c := startTalosLogged(t, &maintenance.Talos{
		Version: "v1.13.9", Stage: runtimeres.MachineStageMaintenance,
		Apply: func(context.Context, []byte, machine.ApplyConfigurationRequest_Mode) error { return nil },
	}, zap.New(core))

	const secret = "s3cret-bootstrap-token"

	for name, doc := range map[string]string{
		"unknown key":  "version: v1alpha1\nmachine:\n  tokken: " + secret + "\n",
		"unknown kind": "apiVersion: v1alpha1\nkind: NoSuchKind\nvalue: " + secret + "\n",
		"bad type":     "version: v1alpha1\nmachine:\n  token: [" + secret + "]\n",
	} {
		_, err := c.ApplyConfiguration(t.Context(), &machine.ApplyConfigurationRequest{Data: []byte(doc)})
		require.Error(t, err, name)
		assert.Equal(t, codes.InvalidArgument, status.Code(err), "%s: %v", name, err)
	}

	require.NotZero(t, logs.Len(), "the calls are logged")

	for _, e := range logs.All() {
		for k, v := range e.ContextMap() {
			assert.NotContains(t, fmt.Sprint(v), secret, "log field %s of %q", k, e.Message)
		}
	}
}
