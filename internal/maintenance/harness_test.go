package maintenance_test

import (
	"context"
	"crypto/tls"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/cosi-project/runtime/api/v1alpha1"
	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/resource/meta"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/siderolabs/talos/pkg/machinery/resources/hardware"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/anvil-metal/anvil/internal/maintenance"
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

// sampleDefinitions are the inventory's types, as the agent's state defines them.
func sampleDefinitions() []meta.ResourceWithRD {
	return []meta.ResourceWithRD{
		&hardware.SystemInformation{}, &hardware.Processor{}, &hardware.MemoryModule{}, &hardware.PCIDevice{},
		&block.Disk{},
		&network.LinkStatus{}, &network.AddressStatus{}, &network.RouteStatus{}, &network.HostnameStatus{}, &network.NodeAddress{},
		&runtimeres.KernelCmdline{}, &runtimeres.PlatformMetadata{},
	}
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

	st, err := maintenance.NewState(ctx, sampleDefinitions()...)
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
