package omnilink_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	omniadapterv1 "github.com/anvil-metal/anvil/api/omniadapter/v1"
	"github.com/anvil-metal/anvil/provider/internal/omnilink"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// On a site of replicas the leader's adapter says the join config to the leader's link,
// which stores it; every replica's link follows it, so that any replica boots machines
// into Omni. A stored config that is not valid (written by anything but a link) is
// ignored, as a bad one from the adapter is refused. Without Shared nothing is stored.
func TestSharedJoinConfig(t *testing.T) {
	t.Parallel()

	st, err := resources.Open(t.Context(), t.TempDir())
	require.NoError(t, err)

	t.Cleanup(func() { st.Close() })

	leader := omnilink.New(omnilink.Options{Socket: filepath.Join(shortDir(t), "omni-adapter.sock"), State: st, Shared: true, Logger: zap.NewNop()})
	follower := omnilink.New(omnilink.Options{Socket: filepath.Join(shortDir(t), "omni-adapter.sock"), State: st, Shared: true, Logger: zap.NewNop()})

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)

	go func() { done <- follower.Follow(ctx) }()

	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })

	_, known := follower.JoinArgs()
	assert.False(t, known, "no join config before the leader's adapter says one")

	client := serve(t, leader) // says a=1 first

	args := []string{"siderolink.api=grpc://10.77.0.3:8090?jointoken=secret", "talos.events.sink=[fdae::1]:8090"}
	_, err = client.SetJoinConfig(t.Context(), &omniadapterv1.SetJoinConfigRequest{KernelArgs: args, Config: "apiVersion: v1alpha1\n"})
	require.NoError(t, err)

	require.Eventually(t, func() bool {
		got, ok := follower.JoinArgs()

		return ok && assert.ObjectsAreEqual(args, got)
	}, 10*time.Second, 20*time.Millisecond, "the follower did not get the leader's join config")

	config, ok := follower.JoinConfig()
	assert.True(t, ok)
	assert.Equal(t, "apiVersion: v1alpha1\n", config)

	// A stored config no adapter could have said is ignored: the follower keeps its own.
	require.NoError(t, safe.StateModify(t.Context(), st, resources.NewOmniJoin(), func(j *resources.OmniJoin) error {
		j.TypedSpec().KernelArgs = []string{"two words"}

		return nil
	}))

	time.Sleep(200 * time.Millisecond)

	got, _ := follower.JoinArgs()
	assert.Equal(t, args, got)

	// Unshared (one provider): the join config stays in memory.
	st2, err := resources.Open(t.Context(), t.TempDir())
	require.NoError(t, err)

	t.Cleanup(func() { st2.Close() })

	alone := omnilink.New(omnilink.Options{Socket: filepath.Join(shortDir(t), "omni-adapter.sock"), State: st2, Logger: zap.NewNop()})
	_, err = serve(t, alone).SetJoinConfig(t.Context(), &omniadapterv1.SetJoinConfigRequest{KernelArgs: args})
	require.NoError(t, err)

	_, err = safe.StateGetByID[*resources.OmniJoin](t.Context(), st2, resources.OmniJoinID)
	assert.Error(t, err, "one provider stores no join config")
}

// deposedCore is a leader's fenced state once another replica leads: every write fails.
type deposedCore struct{ state.CoreState }

var errDeposed = errors.New("write refused by etcd: this replica no longer leads")

func (deposedCore) Create(context.Context, resource.Resource, ...state.CreateOption) error {
	return errDeposed
}

func (deposedCore) Update(context.Context, resource.Resource, ...state.UpdateOption) error {
	return errDeposed
}

// While the link serves a term of leadership, what the adapter says is written through
// the term's fenced state: a deposed leader's adapter writes nothing.
func TestServeFencedWritesThroughTheTerm(t *testing.T) {
	t.Parallel()

	st, err := resources.Open(t.Context(), t.TempDir())
	require.NoError(t, err)

	t.Cleanup(func() { st.Close() })

	link := omnilink.New(omnilink.Options{Socket: filepath.Join(shortDir(t), "omni-adapter.sock"), State: st, Shared: true, Logger: zap.NewNop()})

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)

	go func() { done <- link.ServeFenced(ctx, state.WrapCore(deposedCore{st})) }()

	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })

	conn, err := grpc.NewClient("unix://"+link.Socket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)

	t.Cleanup(func() { conn.Close() })

	client := omniadapterv1.NewOmniAdapterServiceClient(conn)

	const id = "4c4c4544-0000-1000-8000-000000000009"

	require.Eventually(t, func() bool {
		_, err := client.ApplyMachine(t.Context(), &omniadapterv1.ApplyMachineRequest{Machine: &omniadapterv1.OmniMachine{Id: id}})

		return err != nil && strings.Contains(err.Error(), "no longer leads")
	}, 10*time.Second, 20*time.Millisecond, "the deposed link's write went through")

	_, err = client.SetJoinConfig(t.Context(), &omniadapterv1.SetJoinConfigRequest{KernelArgs: []string{"a=1"}})
	require.Error(t, err, "the join config is not stored by a deposed leader")

	_, err = safe.StateGetByID[*resources.OmniMachine](t.Context(), st, id)
	assert.True(t, state.IsNotFoundError(err), "nothing written: %v", err)

	_, err = safe.StateGetByID[*resources.OmniJoin](t.Context(), st, resources.OmniJoinID)
	assert.True(t, state.IsNotFoundError(err), "nothing written: %v", err)
}
