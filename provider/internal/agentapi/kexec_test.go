package agentapi_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	agentv1 "github.com/anvil-metal/anvil/api/agent/v1"
	"github.com/anvil-metal/anvil/internal/token"
	"github.com/anvil-metal/anvil/provider/internal/agentapi"
	"github.com/anvil-metal/anvil/provider/internal/lifecycle"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// targets are kexec targets made ready after a moment, or failing.
type targets struct {
	err error
}

func (tg targets) KexecTarget(ctx context.Context, machineID, arch string, alloc *resources.Allocation) (*agentv1.Kexec, error) {
	select {
	case <-time.After(50 * time.Millisecond): // a download
	case <-ctx.Done():
		return nil, ctx.Err()
	}

	if tg.err != nil {
		return nil, tg.err
	}

	return &agentv1.Kexec{KernelUrl: "http://p/" + alloc.SchematicID + "/kernel-" + arch, KernelSha256: "ab", Cmdline: "talos.config=" + machineID}, nil
}

// allocatedMachine stores a machine accepted, wiped and allocated, its agent up, with a
// BMC the provider drives or none.
func (f *fixture) allocatedMachine(t *testing.T, bmc bool) {
	t.Helper()

	ctx := t.Context()

	m := resources.NewMachine(machineID)
	m.TypedSpec().Arch, m.TypedSpec().MACs = "amd64", []string{"52:54:00:00:00:01"}
	require.NoError(t, f.store.Create(ctx, m))

	in := resources.NewMachineIntent(machineID)
	in.TypedSpec().Acceptance, in.TypedSpec().WipeID = resources.AcceptanceAccepted, "w1"
	in.TypedSpec().Allocation = &resources.Allocation{ID: "a1", SchematicID: "s1", TalosVersion: "v1.13.0"}
	require.NoError(t, f.store.Create(ctx, in))

	st := resources.NewMachineStatus(machineID)
	st.TypedSpec().WipedID = "w1"
	require.NoError(t, f.store.Create(ctx, st))

	if bmc {
		cfg := resources.NewBMCConfig(machineID)
		cfg.TypedSpec().Kind, cfg.TypedSpec().Address, cfg.TypedSpec().Username = "ipmi", "10.0.0.5", "admin"
		require.NoError(t, f.store.Create(ctx, cfg))
	}

	// The session decides from the view, which follows the state a moment later: a
	// session opened before it caught up would be told to wipe.
	require.Eventually(t, func() bool {
		e := f.view.Get(machineID)

		return e != nil && e.Status != nil && e.Status.WipedID == "w1" && e.Allocation() != nil && (!bmc || e.BMC != nil)
	}, 10*time.Second, time.Millisecond, "the view did not follow the state")
}

func TestSessionKexec(t *testing.T) {
	t.Parallel()

	kexecPolicy := func(tg agentapi.KexecTargets) func(*agentapi.Options) {
		return func(o *agentapi.Options) {
			o.Policy.Kexec = resources.KexecAuto
			o.Kexec = tg
		}
	}

	hello := func(t *testing.T, f *fixture) agentv1.AgentService_SessionClient {
		t.Helper()

		stream, err := f.hello(t, token.Sign(f.key, token.Claims{Kind: token.KindAgent, MachineID: machineID, Issued: time.Now()}))
		require.NoError(t, err)

		return stream
	}

	t.Run("loaded", func(t *testing.T) {
		t.Parallel()

		f := newFixtureWith(t, kexecPolicy(targets{}))
		f.allocatedMachine(t, true)

		stream := hello(t, f)
		o := nextOrder(t, stream)

		require.Equal(t, "kexec-a1", o.GetId())
		assert.Equal(t, "http://p/s1/kernel-amd64", o.GetKexec().GetKernelUrl(), "the target, made ready before the order")
		assert.Equal(t, "talos.config="+machineID, o.GetKexec().GetCmdline())
		assert.Equal(t, []string{"ordered a1"}, f.rec.events(), "recorded before it was sent")

		require.NoError(t, stream.Send(&agentv1.AgentMessage{Message: &agentv1.AgentMessage_Result{Result: &agentv1.OrderResult{
			OrderId: o.GetId(), Status: agentv1.OrderResult_STATUS_DONE, Message: "next kernel loaded: jumping",
		}}}))

		// After the agent's registration, the handoff.
		for registered := true; registered; {
			select {
			case obs := <-f.obs:
				if registered = obs.Registered; registered {
					continue
				}

				assert.Equal(t, string(lifecycle.BootTalos), obs.Decision, "Talos is known at the agent's address")
				assert.Equal(t, "127.0.0.1", obs.Address)
				assert.Equal(t, "52:54:00:00:00:01", obs.MAC)
			case <-time.After(5 * time.Second):
				t.Fatal("the handoff was not observed")
			}
		}

		require.Eventually(t, func() bool { return len(f.rec.events()) == 2 }, 5*time.Second, time.Millisecond)
		assert.Equal(t, "loaded a1", f.rec.events()[1])
	})

	for _, tc := range []struct {
		name string
		bmc  bool
		want string
	}{
		{"assets fail: the agent reboots it through the firmware", true, "boot-allocation-a1"},
		{"assets fail, no BMC: the same", false, "boot-allocation-a1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			f := newFixtureWith(t, kexecPolicy(targets{err: errors.New("factory unreachable")}))
			f.allocatedMachine(t, tc.bmc)

			o := nextOrder(t, hello(t, f))

			assert.Equal(t, tc.want, o.GetId())
			assert.Equal(t, []string{"failed a1: the Talos boot assets could not be made ready: factory unreachable"}, f.rec.events())
		})
	}

	t.Run("agent reports the kexec failed", func(t *testing.T) {
		t.Parallel()

		f := newFixtureWith(t, kexecPolicy(targets{}))
		f.allocatedMachine(t, true)

		stream := hello(t, f)
		o := nextOrder(t, stream)
		require.Equal(t, "kexec-a1", o.GetId())

		require.NoError(t, stream.Send(&agentv1.AgentMessage{Message: &agentv1.AgentMessage_Result{Result: &agentv1.OrderResult{
			OrderId: o.GetId(), Status: agentv1.OrderResult_STATUS_FAILED, Message: "its SHA-256 is 00, not ab",
		}}}))

		assert.Equal(t, "boot-allocation-a1", nextOrder(t, stream).GetId())
		assert.Equal(t, []string{"ordered a1", "failed a1: its SHA-256 is 00, not ab"}, f.rec.events())
	})

	// An agent under agent-mode Talos says it cannot kexec: it is never ordered to, even
	// with kexec always and before its inventory (and so the machine's status) says so;
	// the log says why the machine goes through its firmware.
	t.Run("an agent that cannot: never ordered, whatever the mode", func(t *testing.T) {
		t.Parallel()

		core, logs := observer.New(zap.InfoLevel)
		f := newFixtureWith(t, func(o *agentapi.Options) {
			o.Policy.Kexec = resources.KexecAlways
			o.Kexec = targets{}
			o.Logger = zap.New(core)
		})
		f.allocatedMachine(t, true)

		stream, err := f.client.Session(t.Context())
		require.NoError(t, err)
		require.NoError(t, stream.Send(&agentv1.AgentMessage{Message: &agentv1.AgentMessage_Hello{Hello: &agentv1.Hello{
			MachineId: machineID, BootId: "b1", Token: token.Sign(f.key, token.Claims{Kind: token.KindAgent, MachineID: machineID, Issued: time.Now()}),
			KexecUnavailable: "the agent runs as a Talos extension: Talos keeps kexec to itself",
		}}}))

		msg, err := stream.Recv()
		require.NoError(t, err)
		require.NotNil(t, msg.GetWelcome())

		o := nextOrder(t, stream)
		assert.Equal(t, "boot-allocation-a1", o.GetId())
		assert.NotNil(t, o.GetReboot())
		assert.Empty(t, f.rec.events(), "no kexec ordered, none failed")

		noKexec := logs.FilterMessageSnippet("no kexec: the agent cannot").All()
		if assert.Len(t, noKexec, 1) {
			assert.Equal(t, "the agent runs as a Talos extension: Talos keeps kexec to itself", noKexec[0].ContextMap()["reason"])
		}

		connected := logs.FilterMessage("agent connected").All()
		if assert.Len(t, connected, 1) {
			assert.Contains(t, connected[0].ContextMap(), "kexec_unavailable")
		}
	})

	t.Run("no targets: never ordered", func(t *testing.T) {
		t.Parallel()

		f := newFixtureWith(t, kexecPolicy(nil))
		f.allocatedMachine(t, false)

		assert.Equal(t, "boot-allocation-a1", nextOrder(t, hello(t, f)).GetId())
	})
}
