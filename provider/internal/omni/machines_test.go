package omni_test

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/controller/runtime"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/cosi-project/runtime/pkg/state/impl/inmem"
	"github.com/cosi-project/runtime/pkg/state/impl/namespaced"
	"github.com/siderolabs/omni/client/api/omni/specs"
	"github.com/siderolabs/omni/client/pkg/omni/resources/infra"
	omnires "github.com/siderolabs/omni/client/pkg/omni/resources/omni"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/anvil-metal/anvil/provider/internal/controllers"
	"github.com/anvil-metal/anvil/provider/internal/lifecycle"
	"github.com/anvil-metal/anvil/provider/internal/omni"
	"github.com/anvil-metal/anvil/provider/internal/omnilink"
	"github.com/anvil-metal/anvil/provider/internal/resources"
	"github.com/anvil-metal/anvil/provider/internal/transitions"
)

// TestOmniMachinesToIntent is the Omni → desired-state path whole, row by row: an
// in-memory state holding Omni's infra types (as Omni's API serves them) is followed by
// the adapter, which hands each infra.Machine of its provider to the provider's real
// link; the provider's real controller runtime makes it the machine's intent through
// the transitions. Each row changes Omni's infra.Machine of one machine and waits for
// the intent the mapping rules want; a machine of another provider is never handed over.
func TestOmniMachinesToIntent(t *testing.T) {
	t.Parallel()

	const (
		providerID = "anvil-test"
		id         = "4c4c4544-0000-1000-8000-0000000000aa"
		foreign    = "4c4c4544-0000-1000-8000-0000000000bb"
	)

	ctx := t.Context()
	omniState := state.WrapCore(namespaced.NewState(inmem.Build))
	provider := runProvider(t, providerID, omniState)

	for _, mid := range []string{id, foreign} {
		m := resources.NewMachine(mid)
		m.TypedSpec().Arch = "amd64"
		require.NoError(t, provider.Create(ctx, m))
	}

	other := infra.NewMachine(foreign)
	other.Metadata().Labels().Set(omnires.LabelInfraProviderID, "someone-else")
	other.TypedSpec().Value.AcceptanceStatus = specs.InfraMachineConfigSpec_ACCEPTED
	require.NoError(t, omniState.Create(ctx, other))

	im := infra.NewMachine(id)
	im.Metadata().Labels().Set(omnires.LabelInfraProviderID, providerID)
	require.NoError(t, omniState.Create(ctx, im))

	type want struct {
		acceptance resources.Acceptance
		talos      string
		power      resources.PowerState
		idle       resources.PowerState
		wipeID     string
		rebootID   string
		cordoned   bool
	}

	acc := specs.InfraMachineConfigSpec_ACCEPTED
	on, off := specs.InfraMachineSpec_POWER_STATE_ON, specs.InfraMachineSpec_POWER_STATE_OFF

	for _, row := range []struct {
		name   string
		change func(*specs.InfraMachineSpec)
		want   want
	}{
		{"pending, Omni's power preference ignored", func(s *specs.InfraMachineSpec) { s.PreferredPowerState = on },
			want{acceptance: resources.AcceptancePending, power: resources.PowerDefault}},
		{"accepted: the initial wipe", func(s *specs.InfraMachineSpec) { s.AcceptanceStatus, s.PreferredPowerState = acc, off },
			want{acceptance: resources.AcceptanceAccepted, power: resources.PowerDefault, idle: resources.PowerOff, wipeID: "omni:initial"}},
		{"allocated", func(s *specs.InfraMachineSpec) {
			s.ClusterTalosVersion, s.Extensions, s.ExtraKernelArgs, s.PreferredPowerState = "v1.9.0", []string{"siderolabs/intel-ucode"}, "console=ttyS0", on
		}, want{acceptance: resources.AcceptanceAccepted, talos: "v1.9.0", power: resources.PowerDefault, idle: resources.PowerOn, wipeID: "omni:initial"}},
		{"installed (Omni counted an install)", func(s *specs.InfraMachineSpec) { s.InstallEventId = 1 },
			want{acceptance: resources.AcceptanceAccepted, talos: "v1.9.0", power: resources.PowerDefault, idle: resources.PowerOn, wipeID: "omni:initial"}},
		{"a reboot request", func(s *specs.InfraMachineSpec) { s.RequestedRebootId = "r1" },
			want{acceptance: resources.AcceptanceAccepted, talos: "v1.9.0", power: resources.PowerDefault, idle: resources.PowerOn, wipeID: "omni:initial", rebootID: "omni:reboot=r1"}},
		{"a power-off request", func(s *specs.InfraMachineSpec) { s.PowerOffRequestId = "p1" },
			want{acceptance: resources.AcceptanceAccepted, talos: "v1.9.0", power: resources.PowerOff, idle: resources.PowerOn, wipeID: "omni:initial", rebootID: "omni:reboot=r1"}},
		{"cluster deleted: a new wipe id", func(s *specs.InfraMachineSpec) {
			s.ClusterTalosVersion, s.Extensions, s.ExtraKernelArgs, s.PowerOffRequestId, s.PreferredPowerState, s.WipeId = "", nil, "", "", off, "w1"
		}, want{acceptance: resources.AcceptanceAccepted, power: resources.PowerDefault, idle: resources.PowerOff, wipeID: "omni:w1", rebootID: "omni:reboot=r1,wipe=w1"}},
		{"cordoned", func(s *specs.InfraMachineSpec) { s.Cordoned = true },
			want{acceptance: resources.AcceptanceAccepted, power: resources.PowerDefault, idle: resources.PowerOff, wipeID: "omni:w1", rebootID: "omni:reboot=r1,wipe=w1", cordoned: true}},
		{"rejected", func(s *specs.InfraMachineSpec) { s.AcceptanceStatus = specs.InfraMachineConfigSpec_REJECTED },
			want{acceptance: resources.AcceptanceRejected, power: resources.PowerDefault, wipeID: "omni:w1", rebootID: "omni:reboot=r1,wipe=w1", cordoned: true}},
	} {
		_, err := safe.StateUpdateWithConflicts(ctx, omniState, im.Metadata(), func(m *infra.Machine) error {
			row.change(m.TypedSpec().Value)

			return nil
		})
		require.NoError(t, err, row.name)

		var got want

		ok := assert.Eventually(t, func() bool {
			in, err := safe.StateGetByID[*resources.MachineIntent](ctx, provider, id)
			if err != nil {
				return false
			}

			s := in.TypedSpec()
			got = want{acceptance: s.Acceptance, power: s.Power, idle: s.IdlePower, wipeID: s.WipeID, rebootID: s.RebootID, cordoned: s.Cordoned}

			if s.Allocation != nil {
				got.talos = s.Allocation.TalosVersion
			}

			return got == row.want
		}, 20*time.Second, 10*time.Millisecond, "%s: the intent", row.name)
		if !ok {
			t.Logf("%s: got %+v, want %+v", row.name, got, row.want)
		}

		om, err := safe.StateGetByID[*resources.OmniMachine](ctx, provider, id)
		require.NoError(t, err)
		assert.Equal(t, im.Metadata().ID(), om.Metadata().ID())
	}

	_, err := safe.StateGetByID[*resources.OmniMachine](ctx, provider, foreign)
	assert.True(t, state.IsNotFoundError(err), "another provider's machine is not handed over: %v", err)

	foreignNow, err := safe.StateGetByID[*infra.Machine](ctx, omniState, foreign)
	require.NoError(t, err)
	assert.Empty(t, *foreignNow.Metadata().Finalizers(), "nor held")

	// The provider's finalizer holds Omni's removal of the machine.
	got, err := safe.StateGetByID[*infra.Machine](ctx, omniState, id)
	require.NoError(t, err)
	assert.True(t, got.Metadata().Finalizers().Has(omni.Finalizer(providerID)), "the provider's finalizer")

	// Omni drops the machine: it is gone from Omni's view, and pending again; then the
	// finalizer goes, and Omni's removal completes.
	ready, err := omniState.Teardown(ctx, im.Metadata())
	require.NoError(t, err)
	assert.False(t, ready, "held by the provider's finalizer")

	_, err = omniState.WatchFor(ctx, im.Metadata(), state.WithFinalizerEmpty())
	require.NoError(t, err)
	require.NoError(t, omniState.Destroy(ctx, im.Metadata()))

	assert.Eventually(t, func() bool {
		om, err := safe.StateGetByID[*resources.OmniMachine](ctx, provider, id)
		if err != nil || !om.TypedSpec().Gone {
			return false
		}

		in, err := safe.StateGetByID[*resources.MachineIntent](ctx, provider, id)

		return err == nil && in.TypedSpec().Acceptance == resources.AcceptancePending && in.TypedSpec().Allocation == nil
	}, 20*time.Second, 10*time.Millisecond, "gone from Omni, pending")
}

// runProvider runs the provider's side for the test: its store, its link to the adapter
// on a socket, the Omni intent controller in a real runtime, and the adapter's
// connection to omniState, until the test ends.
func runProvider(t *testing.T, providerID string, omniState state.State) *resources.Store {
	t.Helper()

	store, err := resources.Open(t.Context(), t.TempDir())
	require.NoError(t, err)

	dir, err := os.MkdirTemp("", "omni") // short: a socket path fits in 108 bytes
	require.NoError(t, err)

	logger := zaptest.NewLogger(t)
	tr := transitions.New(store, transitions.Options{ManagedBy: "Omni at https://omni.lab:8099", Logger: logger})
	link := omnilink.New(omnilink.Options{Socket: filepath.Join(dir, "omni-adapter.sock"), State: store, BMCs: tr, Logger: logger.Named("link")})

	rt, err := runtime.NewRuntime(store, logger.Named("runtime"))
	require.NoError(t, err)
	require.NoError(t, rt.RegisterQController(&controllers.OmniIntentController{Applier: tr.Owner()}))
	require.NoError(t, rt.RegisterQController(&controllers.OmniMachineStatusController{Policy: lifecycle.Policy{}}))

	c, err := omni.Dial(omni.Options{
		Endpoint: "https://omni.lab:8099", ProviderID: providerID, State: omniState, ProviderSocket: link.Socket(), Logger: zap.NewNop(),
	})
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())

	var wg sync.WaitGroup

	wg.Go(func() { link.Serve(ctx) }) //nolint:errcheck // nil when ctx ends
	wg.Go(func() { rt.Run(ctx) })     //nolint:errcheck // nil when ctx ends
	wg.Go(func() { c.Run(ctx) })      //nolint:errcheck // nil when ctx ends

	t.Cleanup(func() {
		cancel()
		wg.Wait()
		store.Close()
		os.RemoveAll(dir)
	})

	return store
}

// TestStatusesReachOmni is the provider → Omni path whole: the provider's Omni status of
// a machine Omni has (its real controller, from the machine's state) reaches Omni's
// state as the machine's infra.MachineStatus — power, ready to use, the token a wipe
// voided, the labels — follows its changes, and goes when Omni drops the machine.
func TestStatusesReachOmni(t *testing.T) {
	t.Parallel()

	const (
		providerID = "anvil-test"
		id         = "4c4c4544-0000-1000-8000-0000000000cc"
	)

	ctx := t.Context()
	omniState := state.WrapCore(namespaced.NewState(inmem.Build))
	provider := runProvider(t, providerID, omniState)

	m := resources.NewMachine(id)
	m.TypedSpec().Arch = "amd64"
	require.NoError(t, provider.Create(ctx, m))

	// The machine was wiped (what the status controller records from the agent's report).
	ms := resources.NewMachineStatus(id)
	ms.TypedSpec().WipedID = "omni:initial"
	ms.TypedSpec().LastWipe = &resources.WipeRecord{ID: "omni:initial", OmniNodeUniqueToken: "tok-void"}
	require.NoError(t, provider.Create(ctx, ms))

	ps := resources.NewPowerStatus(id)
	ps.TypedSpec().State = resources.PowerOff
	require.NoError(t, provider.Create(ctx, ps))

	ml := resources.NewMachineLabels(id)
	ml.Metadata().Labels().Set("anvil.dev/vendor", "dell-inc")
	ml.Metadata().Labels().Set("rack", "r1")
	require.NoError(t, provider.Create(ctx, ml))

	im := infra.NewMachine(id)
	im.Metadata().Labels().Set(omnires.LabelInfraProviderID, providerID)
	im.TypedSpec().Value.AcceptanceStatus = specs.InfraMachineConfigSpec_ACCEPTED
	require.NoError(t, omniState.Create(ctx, im))

	status := func() *infra.MachineStatus {
		s, err := safe.StateGetByID[*infra.MachineStatus](ctx, omniState, id)
		if err != nil {
			return nil
		}

		return s
	}

	require.Eventually(t, func() bool {
		s := status()

		return s != nil && s.TypedSpec().Value.ReadyToUse && s.TypedSpec().Value.PowerState == specs.InfraMachineStatusSpec_POWER_STATE_OFF
	}, 20*time.Second, 10*time.Millisecond, "the infra machine status in Omni")

	s := status()
	assert.Equal(t, "tok-void", s.TypedSpec().Value.WipedNodeUniqueToken)
	assert.False(t, s.TypedSpec().Value.Installed)

	vendor, _ := s.Metadata().Labels().Get("anvil.dev/vendor")
	rack, _ := s.Metadata().Labels().Get("rack")
	assert.Equal(t, []string{"dell-inc", "r1"}, []string{vendor, rack})

	// The machine powers on, a label goes.
	_, err := safe.StateUpdateWithConflicts(ctx, provider, ps.Metadata(), func(ps *resources.PowerStatus) error {
		ps.TypedSpec().State = resources.PowerOn

		return nil
	})
	require.NoError(t, err)

	_, err = safe.StateUpdateWithConflicts(ctx, provider, ml.Metadata(), func(ml *resources.MachineLabels) error {
		ml.Metadata().Labels().Delete("rack")

		return nil
	})
	require.NoError(t, err)

	require.Eventually(t, func() bool {
		s := status()
		if s == nil {
			return false
		}

		_, rack := s.Metadata().Labels().Get("rack")

		return s.TypedSpec().Value.PowerState == specs.InfraMachineStatusSpec_POWER_STATE_ON && !rack
	}, 20*time.Second, 10*time.Millisecond, "the status follows the machine")

	// Omni drops the machine (its teardown waits for the provider's finalizer): its
	// status goes from Omni too.
	_, err = omniState.Teardown(ctx, im.Metadata())
	require.NoError(t, err)

	_, err = omniState.WatchFor(ctx, im.Metadata(), state.WithFinalizerEmpty())
	require.NoError(t, err)
	require.NoError(t, omniState.Destroy(ctx, im.Metadata()))

	require.Eventually(t, func() bool { return status() == nil }, 20*time.Second, 10*time.Millisecond, "the status goes")
}

// TestBMCsReachTheProvider: a BMC an admin gives in Omni for one of the provider's
// machines becomes the machine's BMC, as a user's (the agent never replaces it), its
// password in the secret the state API never serves; another provider's is not
// handed over.
func TestBMCsReachTheProvider(t *testing.T) {
	t.Parallel()

	const (
		providerID = "anvil-test"
		id         = "4c4c4544-0000-1000-8000-0000000000dd"
		foreign    = "4c4c4544-0000-1000-8000-0000000000ee"
	)

	ctx := t.Context()
	omniState := state.WrapCore(namespaced.NewState(inmem.Build))
	provider := runProvider(t, providerID, omniState)

	other := infra.NewBMCConfig(foreign)
	other.Metadata().Labels().Set(omnires.LabelInfraProviderID, "someone-else")
	other.TypedSpec().Value.Config = &specs.InfraMachineBMCConfigSpec{Api: &specs.InfraMachineBMCConfigSpec_API{Address: "http://10.0.0.9"}}
	require.NoError(t, omniState.Create(ctx, other))

	bmc := infra.NewBMCConfig(id)
	bmc.Metadata().Labels().Set(omnires.LabelInfraProviderID, providerID)
	bmc.TypedSpec().Value.Config = &specs.InfraMachineBMCConfigSpec{Ipmi: &specs.InfraMachineBMCConfigSpec_IPMI{
		Address: "10.0.0.5", Port: 623, Username: "admin", Password: "bmc-secret",
	}}
	require.NoError(t, omniState.Create(ctx, bmc))

	var cfg *resources.BMCConfig

	require.Eventually(t, func() bool {
		var err error

		cfg, err = safe.StateGetByID[*resources.BMCConfig](ctx, provider, id)

		return err == nil
	}, 20*time.Second, 10*time.Millisecond, "the machine's BMC")

	assert.Equal(t, "ipmi", cfg.TypedSpec().Kind)
	assert.Equal(t, "10.0.0.5", cfg.TypedSpec().Address)
	assert.Equal(t, "admin", cfg.TypedSpec().Username)
	assert.Equal(t, resources.BMCSourceUser, cfg.TypedSpec().Source)

	secret, err := safe.StateGetByID[*resources.BMCSecret](ctx, provider, id)
	require.NoError(t, err)
	assert.Equal(t, "bmc-secret", secret.TypedSpec().Password)

	_, err = safe.StateGetByID[*resources.BMCConfig](ctx, provider, foreign)
	assert.True(t, state.IsNotFoundError(err), "another provider's BMC: %v", err)
}
