package maintenance_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"errors"
	"io"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cosi-project/runtime/api/v1alpha1"
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
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/anvil-metal/anvil/agent/internal/inventory"
	"github.com/anvil-metal/anvil/agent/internal/maintenance"
)

const (
	agentVersion = "v0.9.0-test"
	bootID       = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0\n"
)

// served is every type the API serves, with its namespace: the inventory's, the
// statuses this package writes, and meta's own.
var served = map[resource.Type]resource.Namespace{
	meta.ResourceDefinitionType:     meta.NamespaceName,
	meta.NamespaceType:              meta.NamespaceName,
	hardware.SystemInformationType:  hardware.NamespaceName,
	hardware.ProcessorType:          hardware.NamespaceName,
	hardware.MemoryModuleType:       hardware.NamespaceName,
	hardware.PCIDeviceType:          hardware.NamespaceName,
	block.DiskType:                  block.NamespaceName,
	network.LinkStatusType:          network.NamespaceName,
	network.AddressStatusType:       network.NamespaceName,
	network.RouteStatusType:         network.NamespaceName,
	network.HostnameStatusType:      network.NamespaceName,
	network.NodeAddressType:         network.NamespaceName,
	runtimeres.KernelCmdlineType:    runtimeres.NamespaceName,
	runtimeres.PlatformMetadataType: runtimeres.NamespaceName,
	runtimeres.MachineStatusType:    runtimeres.NamespaceName,
	runtimeres.ExtensionStatusType:  runtimeres.NamespaceName,
}

// inventorySamples is one resource of each inventory type, as the collector would
// write them: the API serves whatever the state holds.
func inventorySamples() []resource.Resource {
	system := hardware.NewSystemInformation(hardware.SystemInformationID)
	system.TypedSpec().UUID = "4c4c4544-0042-3510-8052-b4c04f4e3732"

	cpu := hardware.NewProcessorInfo("CPU-1")
	cpu.TypedSpec().CoreCount, cpu.TypedSpec().ThreadCount = 8, 16

	mem := hardware.NewMemoryModuleInfo("DIMM-A1")
	mem.TypedSpec().Size = 16384

	pci := hardware.NewPCIDeviceInfo("0000:00:02.0")
	pci.TypedSpec().VendorID = "0x8086"

	disk := block.NewDisk(block.NamespaceName, "nvme0n1")
	disk.TypedSpec().DevPath, disk.TypedSpec().Transport = "/dev/nvme0n1", "nvme"

	link := network.NewLinkStatus(network.NamespaceName, "eth0")
	link.TypedSpec().Index = 2

	addr := network.NewAddressStatus(network.NamespaceName, "eth0/10.0.0.5/24")
	addr.TypedSpec().Address = netip.MustParsePrefix("10.0.0.5/24")

	route := network.NewRouteStatus(network.NamespaceName, "inet4/10.0.0.1//1024")
	route.TypedSpec().Gateway = netip.MustParseAddr("10.0.0.1")

	hostname := network.NewHostnameStatus(network.NamespaceName, network.HostnameID)
	hostname.TypedSpec().Hostname = "rack1-node7"

	current := network.NewNodeAddress(network.NamespaceName, network.NodeAddressCurrentID)
	current.TypedSpec().Addresses = []netip.Prefix{netip.MustParsePrefix("10.0.0.5/24")}

	cmdline := runtimeres.NewKernelCmdline()
	cmdline.TypedSpec().Cmdline = "console=ttyS0"

	platform := runtimeres.NewPlatformMetadataSpec(runtimeres.NamespaceName, runtimeres.PlatformMetadataID)
	platform.TypedSpec().Platform = "metal"

	return []resource.Resource{system, cpu, mem, pci, disk, link, addr, route, hostname, current, cmdline, platform}
}

// harness is a maintenance API on loopback over a state with the inventory samples,
// and a Talos client configured as Omni's for a machine in maintenance.
type harness struct {
	st   state.State
	c    *client.Client
	addr string
	stop func() error
}

// procWithBootID returns a procfs root holding a boot ID.
func procWithBootID(t *testing.T) string {
	t.Helper()

	root := t.TempDir()
	dir := filepath.Join(root, "sys", "kernel", "random")

	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "boot_id"), []byte(bootID), 0o644))

	return root
}

func start(t *testing.T, procRoot string) *harness {
	t.Helper()

	ctx, cancel := context.WithCancel(t.Context())

	st, err := inventory.NewState(ctx)
	require.NoError(t, err)

	for _, r := range inventorySamples() {
		require.NoError(t, st.Create(ctx, r))
	}

	srv, err := maintenance.New(ctx, st, maintenance.Options{AgentVersion: agentVersion, ProcRoot: procRoot, Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)

	done := make(chan error, 1)

	go func() { done <- srv.Serve(ctx, lis) }()

	c, err := client.New(ctx, client.WithEndpoints(lis.Addr().String()), client.WithTLSConfig(&tls.Config{InsecureSkipVerify: true}))
	require.NoError(t, err)

	var (
		once     sync.Once
		serveErr error
	)

	stop := func() error {
		once.Do(func() {
			cancel()

			serveErr = <-done
		})

		return serveErr
	}

	t.Cleanup(func() {
		c.Close()
		assert.NoError(t, stop())
	})

	return &harness{st: st, c: c, addr: lis.Addr().String(), stop: stop}
}

// rawState is a COSI state client without the adapter, to send what the adapter
// would not.
func rawState(t *testing.T, addr string) v1alpha1.StateClient {
	t.Helper()

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{InsecureSkipVerify: true})))
	require.NoError(t, err)

	t.Cleanup(func() { conn.Close() })

	return v1alpha1.NewStateClient(conn)
}

func kind(typ resource.Type) resource.Kind {
	return resource.NewMetadata(served[typ], typ, "", resource.VersionUndefined)
}

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
	for _, rd := range slices.Concat(inventory.Definitions(), maintenance.Definitions()) {
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

func TestRead(t *testing.T) {
	t.Parallel()

	h := start(t, procWithBootID(t))
	noBootID := start(t, t.TempDir())

	for _, tc := range []struct {
		name string
		h    *harness
		path string
		code codes.Code
	}{
		{"boot ID", h, "/proc/sys/kernel/random/boot_id", codes.OK},
		{"boot ID, not clean", h, "/proc/sys/kernel//random/./boot_id", codes.OK},
		{"no boot ID on this machine", noBootID, "/proc/sys/kernel/random/boot_id", codes.NotFound},
		{"another file", h, "/etc/shadow", codes.PermissionDenied},
		{"a sibling", h, "/proc/sys/kernel/random/uuid", codes.PermissionDenied},
		{"relative", h, "proc/sys/kernel/random/boot_id", codes.PermissionDenied},
		{"empty", h, "", codes.PermissionDenied},
		{"a way out", h, "/proc/sys/kernel/random/boot_id/../../../../../etc/shadow", codes.PermissionDenied},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := tc.h.c.Read(t.Context(), tc.path)
			require.NoError(t, err)

			defer r.Close()

			b, err := io.ReadAll(r)
			require.Equal(t, tc.code, client.StatusCode(err), "%v", err)

			if tc.code == codes.OK {
				assert.Equal(t, bootID, string(b))
			}
		})
	}
}

// TestUnimplemented: what the agent does not do, it says so, as Omni expects.
func TestUnimplemented(t *testing.T) {
	t.Parallel()

	h := start(t, procWithBootID(t))
	ctx := t.Context()

	_, err := h.c.MachineClient.Reboot(ctx, &machine.RebootRequest{})
	assert.Equal(t, codes.Unimplemented, status.Code(err), "%v", err)

	_, err = h.c.MachineClient.Reset(ctx, &machine.ResetRequest{})
	assert.Equal(t, codes.Unimplemented, status.Code(err), "%v", err)

	_, err = h.c.MachineClient.Hostname(ctx, &emptypb.Empty{})
	assert.Equal(t, codes.Unimplemented, status.Code(err), "%v", err)

	logs, err := h.c.MachineClient.Dmesg(ctx, &machine.DmesgRequest{})
	require.NoError(t, err)

	_, err = logs.Recv()
	assert.Equal(t, codes.Unimplemented, status.Code(err), "%v", err)

	_, err = h.c.StorageClient.Disks(ctx, &emptypb.Empty{})
	assert.Equal(t, codes.Unimplemented, status.Code(err), "%v", err)
}

// TestWritesRefused: nothing a client sends changes the state, and a write is
// refused before its payload is looked at.
func TestWritesRefused(t *testing.T) {
	t.Parallel()

	h := start(t, procWithBootID(t))
	ctx := t.Context()
	raw := rawState(t, h.addr)

	extra := hardware.NewProcessorInfo("CPU-9")
	assert.Error(t, h.c.COSI.Create(ctx, extra))

	_, err := h.st.Get(ctx, extra.Metadata())
	assert.True(t, state.IsNotFoundError(err), "%v", err)

	status0, err := safe.StateGetByID[*runtimeres.MachineStatus](ctx, h.st, runtimeres.MachineStatusID)
	require.NoError(t, err)

	_, err = h.c.COSI.Teardown(ctx, status0.Metadata())
	assert.Error(t, err)

	assert.Error(t, h.c.COSI.Destroy(ctx, status0.Metadata()))

	status1, err := safe.StateGetByID[*runtimeres.MachineStatus](ctx, h.st, runtimeres.MachineStatusID)
	require.NoError(t, err)
	assert.Equal(t, status0.Metadata().Version(), status1.Metadata().Version())
	assert.Equal(t, resource.PhaseRunning, status1.Metadata().Phase())

	// Raw requests, garbage or empty: refused, not decoded.
	ns, typ, id := runtimeres.NamespaceName, runtimeres.MachineStatusType, runtimeres.MachineStatusID

	for name, call := range map[string]func() error{
		"create": func() error {
			_, err := raw.Create(ctx, &v1alpha1.CreateRequest{Resource: &v1alpha1.Resource{}})

			return err
		},
		"update": func() error {
			_, err := raw.Update(ctx, &v1alpha1.UpdateRequest{})

			return err
		},
		"destroy": func() error {
			_, err := raw.Destroy(ctx, &v1alpha1.DestroyRequest{Namespace: ns, Type: typ, Id: id})

			return err
		},
		"teardown": func() error {
			_, err := raw.Teardown(ctx, &v1alpha1.TeardownRequest{Namespace: ns, Type: typ, Id: id})

			return err
		},
		"teardown and destroy": func() error {
			_, err := raw.TeardownAndDestroy(ctx, &v1alpha1.TeardownAndDestroyRequest{Namespace: ns, Type: typ, Id: id})

			return err
		},
	} {
		err := call()
		assert.Equal(t, codes.PermissionDenied, status.Code(err), "%s: %v", name, err)
	}
}

// TestBadRequests: requests no client should send get clear errors, and the server
// carries on.
func TestBadRequests(t *testing.T) {
	t.Parallel()

	h := start(t, procWithBootID(t))
	ctx := t.Context()
	raw := rawState(t, h.addr)

	noValue := &v1alpha1.LabelQuery{Terms: []*v1alpha1.LabelTerm{{Key: "k", Op: v1alpha1.LabelTerm_EQUAL}}}

	list := func(req *v1alpha1.ListRequest) error {
		stream, err := raw.List(ctx, req)
		if err != nil {
			return err
		}

		for {
			if _, err = stream.Recv(); err != nil {
				if errors.Is(err, io.EOF) {
					return nil
				}

				return err
			}
		}
	}

	watch := func(req *v1alpha1.WatchRequest) error {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()

		stream, err := raw.Watch(ctx, req)
		if err != nil {
			return err
		}

		_, err = stream.Recv()

		return err
	}

	for _, tc := range []struct {
		name string
		call func() error
		code codes.Code
	}{
		{"label term without value, list", func() error {
			return list(&v1alpha1.ListRequest{Namespace: hardware.NamespaceName, Type: hardware.ProcessorType,
				Options: &v1alpha1.ListOptions{LabelQuery: []*v1alpha1.LabelQuery{noValue}}})
		}, codes.InvalidArgument},
		{"label term without value, watch", func() error {
			return watch(&v1alpha1.WatchRequest{Namespace: hardware.NamespaceName, Type: hardware.ProcessorType,
				Options: &v1alpha1.WatchOptions{LabelQuery: []*v1alpha1.LabelQuery{noValue}}})
		}, codes.InvalidArgument},
		{"unknown label operator", func() error {
			return list(&v1alpha1.ListRequest{Namespace: hardware.NamespaceName, Type: hardware.ProcessorType,
				Options: &v1alpha1.ListOptions{LabelQuery: []*v1alpha1.LabelQuery{{Terms: []*v1alpha1.LabelTerm{{Key: "k", Op: 99}}}}}})
		}, codes.InvalidArgument},
		{"bad ID regexp", func() error {
			return list(&v1alpha1.ListRequest{Namespace: hardware.NamespaceName, Type: hardware.ProcessorType,
				Options: &v1alpha1.ListOptions{IdQuery: &v1alpha1.IDQuery{Regexp: "("}}})
		}, codes.InvalidArgument},
		{"nothing asked", func() error { return list(&v1alpha1.ListRequest{}) }, codes.NotFound},
		{"a type in another namespace", func() error {
			return list(&v1alpha1.ListRequest{Namespace: network.NamespaceName, Type: hardware.ProcessorType})
		}, codes.NotFound},
		{"a type not served", func() error {
			return list(&v1alpha1.ListRequest{Namespace: runtimeres.NamespaceName, Type: runtimeres.SecurityStateType})
		}, codes.NotFound},
		{"watching a type not served", func() error {
			return watch(&v1alpha1.WatchRequest{Namespace: runtimeres.NamespaceName, Type: runtimeres.MetaKeyType})
		}, codes.NotFound},
		{"watching by ID a type not served", func() error {
			id := "0x0c"

			return watch(&v1alpha1.WatchRequest{Namespace: runtimeres.NamespaceName, Type: runtimeres.MetaKeyType, Id: &id})
		}, codes.NotFound},
		{"a garbage bookmark", func() error {
			return watch(&v1alpha1.WatchRequest{Namespace: hardware.NamespaceName, Type: hardware.ProcessorType,
				Options: &v1alpha1.WatchOptions{StartFromBookmark: []byte("garbage")}})
		}, codes.FailedPrecondition},
	} {
		err := tc.call()
		assert.Equal(t, tc.code, status.Code(err), "%s: %v", tc.name, err)
	}

	_, err := h.c.Version(ctx)
	require.NoError(t, err)
}

// TestTLS: TLS 1.3 with gRPC's h2, a self-signed ECDSA P-256 certificate for the
// address served, and no client certificate asked for (Omni sends none).
func TestTLS(t *testing.T) {
	t.Parallel()

	h := start(t, procWithBootID(t))

	asked := false

	conn, err := tls.Dial("tcp", h.addr, &tls.Config{
		InsecureSkipVerify: true,
		NextProtos:         []string{"h2"},
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			asked = true

			return &tls.Certificate{}, nil
		},
	})
	require.NoError(t, err)

	defer conn.Close()

	cs := conn.ConnectionState()
	assert.False(t, asked, "the server asked for a client certificate")
	assert.Equal(t, "h2", cs.NegotiatedProtocol)
	assert.Equal(t, uint16(tls.VersionTLS13), cs.Version)

	require.Len(t, cs.PeerCertificates, 1)

	leaf := cs.PeerCertificates[0]

	key, ok := leaf.PublicKey.(*ecdsa.PublicKey)
	require.True(t, ok)
	assert.Equal(t, elliptic.P256(), key.Curve)
	assert.Equal(t, "127.0.0.1", leaf.IPAddresses[0].String())
	assert.Len(t, leaf.IPAddresses, 1)
	require.NoError(t, leaf.CheckSignature(leaf.SignatureAlgorithm, leaf.RawTBSCertificate, leaf.Signature), "self-signed")
	assert.True(t, leaf.NotBefore.Before(time.Now()) && leaf.NotAfter.After(time.Now()))

	// Plaintext gRPC is not served.
	plain, err := grpc.NewClient(h.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)

	defer plain.Close()

	_, err = machine.NewMachineServiceClient(plain).Version(t.Context(), &emptypb.Empty{})
	assert.Error(t, err)
}

// TestServeStops: Serve returns nil soon after its context ends: an open watch ends
// then, without waiting for the grace calls in flight get.
func TestServeStops(t *testing.T) {
	t.Parallel()

	h := start(t, procWithBootID(t))

	events := make(chan state.Event, 1)
	require.NoError(t, h.c.COSI.WatchKind(t.Context(), kind(hardware.ProcessorType), events))

	begin := time.Now()

	require.NoError(t, h.stop())
	assert.Less(t, time.Since(begin), time.Second)

	_, err := h.c.Version(t.Context())
	assert.Error(t, err)
}

func TestServeListenerFails(t *testing.T) {
	t.Parallel()

	st, err := inventory.NewState(t.Context())
	require.NoError(t, err)

	srv, err := maintenance.New(t.Context(), st, maintenance.Options{})
	require.NoError(t, err)

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	require.NoError(t, lis.Close())

	assert.Error(t, srv.Serve(t.Context(), lis))
}

// TestNewTwice: a second server over the same state (the tunnel came back on a new
// address) finds its definitions and statuses there and keeps them.
func TestNewTwice(t *testing.T) {
	t.Parallel()

	ctx := t.Context()

	st, err := inventory.NewState(ctx)
	require.NoError(t, err)

	for range 2 {
		_, err = maintenance.New(ctx, st, maintenance.Options{AgentVersion: agentVersion})
		require.NoError(t, err)
	}

	exts, err := safe.StateListAll[*runtimeres.ExtensionStatus](ctx, st)
	require.NoError(t, err)
	assert.Equal(t, 1, exts.Len())
}

func TestListen(t *testing.T) {
	t.Parallel()

	for _, addr := range []netip.Addr{{}, netip.IPv4Unspecified(), netip.IPv6Unspecified()} {
		_, err := maintenance.Listen(t.Context(), addr)
		assert.Error(t, err, "%s", addr)
	}

	lis, err := maintenance.Listen(t.Context(), netip.MustParseAddr("127.0.0.1"))
	if errors.Is(err, syscall.EADDRINUSE) {
		t.Skip("port 50000 is taken on this host")
	}

	require.NoError(t, err)

	defer lis.Close()

	assert.Equal(t, "127.0.0.1:50000", lis.Addr().String())
}
