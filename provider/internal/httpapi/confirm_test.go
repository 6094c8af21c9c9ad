package httpapi_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/anvil-metal/anvil/provider/internal/httpapi"
	"github.com/anvil-metal/anvil/provider/internal/lifecycle"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// etcdNow is the state as etcd holds it now, which a replica's view may not have caught
// up with: its machine intents are what intent says, or its reads fail with err.
type etcdNow struct {
	state.State
	intent *resources.MachineIntentSpec
	err    error
	reads  int
}

func (s *etcdNow) Get(ctx context.Context, ptr resource.Pointer, opts ...state.GetOption) (resource.Resource, error) {
	if ptr.Type() != resources.MachineIntentType {
		return s.State.Get(ctx, ptr, opts...)
	}

	s.reads++

	if s.err != nil {
		return nil, s.err
	}

	in := resources.NewMachineIntent(ptr.ID())
	*in.TypedSpec() = *s.intent

	return in, nil
}

// TestBootAwayFromTheAgentConfirmed: a boot the view would send to the disk or to Talos
// is decided again on the intent read from the state, so a replica whose view has not
// caught up (cut off from etcd, not yet unready) sends a machine deallocated meanwhile to
// its agent and its wipe, not its disk; a replica that cannot read the state answers 503
// (iPXE asks again). A boot to the agent reads nothing: it is always safe.
func TestBootAwayFromTheAgentConfirmed(t *testing.T) {
	t.Parallel()

	installed := &resources.MachineIntentSpec{
		Acceptance: resources.AcceptanceAccepted, WipeID: "w1",
		Allocation: &resources.Allocation{ID: "a1", TalosVersion: "v1.9.0"},
	}
	deallocated := &resources.MachineIntentSpec{Acceptance: resources.AcceptanceAccepted, WipeID: "w2"}
	status := &resources.MachineStatusSpec{WipedID: "w1", InstalledAllocation: "a1"}

	for _, tc := range []struct {
		name     string
		now      etcdNow
		code     int
		decision string
	}{
		{"deallocated meanwhile: the agent, for the wipe", etcdNow{intent: deallocated}, http.StatusOK, "agent"},
		{"still installed: the disk", etcdNow{intent: installed}, http.StatusOK, "disk"},
		{"the state does not answer: 503", etcdNow{err: errors.New("context deadline exceeded")}, http.StatusServiceUnavailable, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			f := newFixture(t)
			f.machine(t, m1, "192.0.2.1", lifecycle.BootDisk, installed, status)

			now := tc.now
			now.State = f.store
			reg := prometheus.NewRegistry()
			f.server = httpapi.New(httpapi.Options{
				State: &now, View: f.view, Scripts: f.scripts, Observations: f.obs, Installs: f.rec,
				Registry: reg, Logger: zaptest.NewLogger(t),
			})

			code, body := f.get(t, bootURL(m1))
			require.Equal(t, tc.code, code, body)
			assert.Equal(t, 1, now.reads, "the intent read from the state")

			if tc.decision == "" {
				assert.Contains(t, body, "cannot confirm")

				code, body = f.get(t, "/metrics")
				require.Equal(t, http.StatusOK, code)
				assert.Contains(t, body, "anvil_boot_decisions_unconfirmed_total 1")

				return
			}

			assert.Equal(t, tc.decision, (<-f.obs).Decision)

			if tc.decision == "agent" {
				assert.Contains(t, body, "kernel http://10.77.0.1:50042/assets/agent/vmlinuz-amd64")
			}
		})
	}

	// An unknown machine boots its agent without a read, whatever the state.
	f := newFixture(t)
	now := &etcdNow{State: f.store, err: errors.New("context deadline exceeded")}
	f.server = httpapi.New(httpapi.Options{
		State: now, View: f.view, Scripts: f.scripts, Observations: f.obs, Installs: f.rec,
		Registry: prometheus.NewRegistry(), Logger: zaptest.NewLogger(t),
	})

	code, body := f.get(t, bootURL(m2))
	require.Equal(t, http.StatusOK, code, body)
	assert.Contains(t, body, "/assets/agent/vmlinuz-amd64")
	assert.Zero(t, now.reads)
}
