package maintenance_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/cosi-project/runtime/api/v1alpha1"
	"github.com/cosi-project/runtime/pkg/resource"
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
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/anvil-metal/anvil/internal/maintenance"
)

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
	// The COSI client turns the refusal (PermissionDenied) into an owner conflict; its
	// message is the API's own.
	const readOnly = "the maintenance API is read-only"

	assert.ErrorContains(t, h.c.COSI.Create(ctx, extra), readOnly, "a served type")

	unserved := block.NewSystemDisk(block.NamespaceName, block.SystemDiskID)
	assert.ErrorContains(t, h.c.COSI.Create(ctx, unserved), readOnly, "a type the API does not serve")

	_, err := h.st.Get(ctx, extra.Metadata())
	assert.True(t, state.IsNotFoundError(err), "%v", err)

	status0, err := safe.StateGetByID[*runtimeres.MachineStatus](ctx, h.st, runtimeres.MachineStatusID)
	require.NoError(t, err)

	_, err = h.c.COSI.Teardown(ctx, status0.Metadata())
	assert.ErrorContains(t, err, readOnly)

	assert.ErrorContains(t, h.c.COSI.Destroy(ctx, status0.Metadata()), readOnly)

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

	st, err := maintenance.NewState(t.Context(), sampleDefinitions()...)
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

	st, err := maintenance.NewState(ctx, sampleDefinitions()...)
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
