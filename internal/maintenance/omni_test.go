package maintenance_test

import (
	"context"
	"io"
	"maps"
	goruntime "runtime"
	"slices"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/resource/meta"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/siderolabs/talos/pkg/machinery/resources/hardware"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/anvil-metal/anvil/internal/maintenance"
)

// TestServedDefinitions: the definitions listed are exactly the types served, and
// each of them can be listed, got and watched, as Omni does with every type listed.
func TestServedDefinitions(t *testing.T) {
	t.Parallel()

	h := start(t, procWithBootID(t))
	ctx := t.Context()

	rds, err := safe.StateListAll[*meta.ResourceDefinition](ctx, h.c.COSI)
	require.NoError(t, err)

	got := map[resource.Type]resource.Namespace{}
	for rd := range rds.All() {
		got[rd.TypedSpec().Type] = rd.TypedSpec().DefaultNamespace
	}

	assert.Equal(t, served, got)

	// The code's definitions are the served ones: one added there must be added to
	// served, and get a sample, or this test fails.
	var defined []resource.Type
	for _, rd := range slices.Concat(sampleDefinitions(), maintenance.Definitions()) {
		defined = append(defined, rd.ResourceDefinition().Type)
	}

	defined = append(defined, meta.ResourceDefinitionType, meta.NamespaceType)
	assert.ElementsMatch(t, slices.Collect(maps.Keys(served)), defined)

	for typ := range served {
		t.Run(typ, func(t *testing.T) {
			list, err := h.c.COSI.List(ctx, kind(typ))
			require.NoError(t, err)
			require.NotEmpty(t, list.Items, "a served type with nothing in it")

			first := list.Items[0]

			r, err := h.c.COSI.Get(ctx, first.Metadata())
			require.NoError(t, err)
			assert.Equal(t, first.Metadata().ID(), r.Metadata().ID())

			events := make(chan state.Event)

			require.NoError(t, h.c.COSI.WatchKind(ctx, kind(typ), events, state.WithBootstrapContents(true)))

			var created int

			for ev := range events {
				if ev.Type == state.Bootstrapped {
					break
				}

				require.Equal(t, state.Created, ev.Type, "%v", ev.Error)

				created++
			}

			assert.Len(t, list.Items, created)
		})
	}
}

// omniWatched are the types Omni v1.9.3's collect task watches when they are defined.
var omniWatched = map[resource.Type]resource.Namespace{
	network.HostnameStatusType:      network.NamespaceName,
	network.LinkStatusType:          network.NamespaceName,
	network.RouteStatusType:         network.NamespaceName,
	network.NodeAddressType:         network.NamespaceName,
	hardware.ProcessorType:          hardware.NamespaceName,
	hardware.MemoryModuleType:       hardware.NamespaceName,
	runtimeres.PlatformMetadataType: runtimeres.NamespaceName,
	runtimeres.MetaKeyType:          runtimeres.NamespaceName,
	runtimeres.ExtensionStatusType:  runtimeres.NamespaceName,
	runtimeres.MachineStatusType:    runtimeres.NamespaceName,
	runtimeres.DiagnosticType:       runtimeres.NamespaceName,
	block.DiskType:                  block.NamespaceName,
}

// TestOmniCalls makes the calls Omni v1.9.3 makes on an agent-booted machine, in its
// order, and checks each answer is one Omni takes.
func TestOmniCalls(t *testing.T) {
	t.Parallel()

	h := start(t, procWithBootID(t))
	ctx := t.Context()

	// Collect task: the types, with Omni's 5 s timeout.
	listCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()

	rds, err := safe.StateListAll[*meta.ResourceDefinition](listCtx, h.c.COSI)
	require.NoError(t, err)

	registered := map[resource.Type]bool{}
	for rd := range rds.All() {
		registered[rd.TypedSpec().Type] = true
	}

	// Its watches, all on one channel, which nothing changes here.
	watchCh := make(chan state.Event)

	for typ, ns := range omniWatched {
		if !registered[typ] {
			assert.Contains(t, []resource.Type{runtimeres.MetaKeyType, runtimeres.DiagnosticType}, typ)

			continue
		}

		require.NoError(t, h.c.COSI.WatchKind(ctx, resource.NewMetadata(ns, typ, "", resource.VersionUndefined), watchCh), typ)
	}

	version, err := h.c.Version(ctx)
	require.NoError(t, err)
	require.Len(t, version.GetMessages(), 1)
	assert.Equal(t, maintenance.TalosVersion, version.GetMessages()[0].GetVersion().GetTag())
	assert.Equal(t, goruntime.GOARCH, version.GetMessages()[0].GetVersion().GetArch())
	assert.Equal(t, agentVersion, version.GetMessages()[0].GetVersion().GetSha())
	assert.Equal(t, "metal", version.GetMessages()[0].GetPlatform().GetName())
	assert.Equal(t, "metal-agent", version.GetMessages()[0].GetPlatform().GetMode())

	// Its pollers: a List of each defined type they know.
	for _, typ := range []resource.Type{
		network.HostnameStatusType, network.RouteStatusType, network.NodeAddressType, network.LinkStatusType,
		hardware.ProcessorType, hardware.MemoryModuleType, runtimeres.PlatformMetadataType,
		runtimeres.ExtensionStatusType, runtimeres.KernelCmdlineType, block.DiskType,
	} {
		require.True(t, registered[typ], typ)

		list, err := h.c.COSI.List(ctx, kind(typ))
		require.NoError(t, err, typ)
		assert.NotEmpty(t, list.Items, typ)
	}

	_, err = safe.StateGetByID[*block.SystemDisk](ctx, h.c.COSI, block.SystemDiskID)
	assert.True(t, state.IsNotFoundError(err), "SystemDisks: %v", err)

	_, err = safe.StateGetByID[*meta.ResourceDefinition](ctx, h.c.COSI, "securitystates.talos.dev")
	assert.True(t, state.IsNotFoundError(err), "SecurityState's definition: %v", err)

	current, err := safe.StateGetByID[*network.NodeAddress](ctx, h.c.COSI, network.NodeAddressCurrentID)
	require.NoError(t, err)
	assert.NotEmpty(t, current.TypedSpec().Addresses)

	extensions, err := safe.StateListAll[*runtimeres.ExtensionStatus](ctx, h.c.COSI)
	require.NoError(t, err)

	var names []string
	for ext := range extensions.All() {
		names = append(names, ext.TypedSpec().Metadata.Name)
	}

	assert.Equal(t, []string{"metal-agent"}, names)

	// Snapshot task: the machine status, by ID.
	statusCh := make(chan state.Event)
	require.NoError(t, h.c.COSI.Watch(ctx, runtimeres.NewMachineStatus().Metadata(), statusCh))

	select {
	case ev := <-statusCh:
		require.Equal(t, state.Created, ev.Type, "%v", ev.Error)

		spec, ok := ev.Resource.Spec().(*runtimeres.MachineStatusSpec)
		require.True(t, ok)
		assert.Equal(t, runtimeres.MachineStageMaintenance, spec.Stage)
		assert.True(t, spec.Status.Ready)
	case <-time.After(10 * time.Second):
		t.Fatal("no machine status")
	}

	// Newer Omni: the boot ID.
	r, err := h.c.Read(ctx, maintenance.BootIDPath)
	require.NoError(t, err)

	b, err := io.ReadAll(r)
	require.NoError(t, err)
	assert.Equal(t, bootID, string(b))
	require.NoError(t, r.Close())

	// Only outside agent mode; both answers are ones Omni tolerates.
	_, err = h.c.COSI.Get(ctx, resource.NewMetadata("config", "MachineConfigs.config.talos.dev", "v1alpha1", resource.VersionUndefined))
	assert.True(t, state.IsNotFoundError(err), "machine config: %v", err)

	_, err = h.c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: []byte("{}"), Mode: machine.ApplyConfigurationRequest_AUTO})
	assert.Equal(t, codes.Unimplemented, client.StatusCode(err), "%v", err)

	// Only for a machine that joined without a unique token.
	_, err = h.c.Disks(ctx)
	assert.Equal(t, codes.Unimplemented, client.StatusCode(err), "%v", err)

	err = h.c.MetaWrite(ctx, 0x10, []byte(`{}`))
	assert.Equal(t, codes.Unimplemented, client.StatusCode(err), "%v", err)
}
