package control_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	controlv1 "github.com/anvil-metal/anvil/api/control/v1"
	"github.com/anvil-metal/anvil/internal/fuzzcorpus"
	"github.com/anvil-metal/anvil/provider/internal/control"
	"github.com/anvil-metal/anvil/provider/internal/imagecache"
	"github.com/anvil-metal/anvil/provider/internal/resources"
	"github.com/anvil-metal/anvil/provider/internal/transitions"
)

// services are the control API's services that take requests which change things.
type services struct {
	tr *control.Transitions
	ic *control.ImageCacheService
}

// rpc is one method: its request type and the call.
type rpc struct {
	name string
	req  func() proto.Message
	call func(ctx context.Context, s services, m proto.Message) (proto.Message, error)
}

// method adapts a typed method of the transition service to rpc.
func method[Req proto.Message, Resp proto.Message](name string, newReq func() Req, fn func(*control.Transitions, context.Context, Req) (Resp, error)) rpc {
	return rpc{
		name: name,
		req:  func() proto.Message { return newReq() },
		call: func(ctx context.Context, s services, m proto.Message) (proto.Message, error) {
			return fn(s.tr, ctx, m.(Req))
		},
	}
}

// cacheMethod adapts a typed method of the image cache service to rpc.
func cacheMethod[Req proto.Message, Resp proto.Message](name string, newReq func() Req, fn func(*control.ImageCacheService, context.Context, Req) (Resp, error)) rpc {
	return rpc{
		name: name,
		req:  func() proto.Message { return newReq() },
		call: func(ctx context.Context, s services, m proto.Message) (proto.Message, error) {
			return fn(s.ic, ctx, m.(Req))
		},
	}
}

// pathCache is an image cache that checks every key it is asked for names a file inside
// it: each part one path element, validated.
type pathCache struct{ t *testing.T }

func (c *pathCache) List() []imagecache.Blob { return nil }

func (c *pathCache) Pull(_ context.Context, k imagecache.Key) (imagecache.Blob, error) {
	for _, part := range []string{k.Schematic, k.Version, k.File} {
		if part == "" || part == "." || part == ".." || strings.ContainsAny(part, "/\\\x00") {
			c.t.Fatalf("key %+v reached the cache", k)
		}
	}

	if err := k.Validate(); err != nil {
		c.t.Fatalf("invalid key %+v reached the cache: %v", k, err)
	}

	return imagecache.Blob{Key: k, Digest: "sha256:00", Size: 1}, nil
}

func (c *pathCache) Prune(_ context.Context, keep func(imagecache.Key) bool) ([]imagecache.Blob, error) {
	keep(imagecache.Key{Schematic: strings.Repeat("a", 64), Version: "v1.9.0", File: "kernel-amd64"})

	return nil, nil
}

var rpcs = []rpc{
	method("accept", func() *controlv1.AcceptRequest { return &controlv1.AcceptRequest{} }, (*control.Transitions).Accept),
	method("reject", func() *controlv1.RejectRequest { return &controlv1.RejectRequest{} }, (*control.Transitions).Reject),
	method("allocate", func() *controlv1.AllocateRequest { return &controlv1.AllocateRequest{} }, (*control.Transitions).Allocate),
	method("deallocate", func() *controlv1.DeallocateRequest { return &controlv1.DeallocateRequest{} }, (*control.Transitions).Deallocate),
	method("mark-installed", func() *controlv1.MarkInstalledRequest { return &controlv1.MarkInstalledRequest{} }, (*control.Transitions).MarkInstalled),
	method("wipe-mode", func() *controlv1.SetWipeModeRequest { return &controlv1.SetWipeModeRequest{} }, (*control.Transitions).SetWipeMode),
	method("kexec-mode", func() *controlv1.SetKexecModeRequest { return &controlv1.SetKexecModeRequest{} }, (*control.Transitions).SetKexecMode),
	method("cordon", func() *controlv1.CordonRequest { return &controlv1.CordonRequest{} }, (*control.Transitions).Cordon),
	method("uncordon", func() *controlv1.UncordonRequest { return &controlv1.UncordonRequest{} }, (*control.Transitions).Uncordon),
	method("power", func() *controlv1.SetPowerRequest { return &controlv1.SetPowerRequest{} }, (*control.Transitions).SetPower),
	method("reboot", func() *controlv1.RebootRequest { return &controlv1.RebootRequest{} }, (*control.Transitions).Reboot),
	method("bmc", func() *controlv1.SetBMCRequest { return &controlv1.SetBMCRequest{} }, (*control.Transitions).SetBMC),
	method("labels", func() *controlv1.SetLabelsRequest { return &controlv1.SetLabelsRequest{} }, (*control.Transitions).SetLabels),
	cacheMethod("pull", func() *controlv1.PullImageCacheRequest { return &controlv1.PullImageCacheRequest{} }, (*control.ImageCacheService).PullImageCache),
	cacheMethod("prune", func() *controlv1.PruneImageCacheRequest { return &controlv1.PruneImageCacheRequest{} }, (*control.ImageCacheService).PruneImageCache),
}

func rpcIndex(name string) byte {
	for i, r := range rpcs {
		if r.name == name {
			return byte(i)
		}
	}

	panic("no rpc " + name)
}

// FuzzTransitions sends any bytes as any transition or image cache request, decoded as
// the gRPC server decodes them, to the services over a real store (the cache checks that
// every key it gets names a file inside it): refusals are the transitions' own
// status codes (never Unknown or Internal: a state error leaking out is a bug), a BMC
// password never appears in an error, and a reply marshals.
func FuzzTransitions(f *testing.F) {
	seed := func(name string, m proto.Message) fuzzcorpus.Entry {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}

		return fuzzcorpus.E(name, rpcIndex(name[:strings.IndexByte(name+".", '.')]), b)
	}

	fuzzcorpus.Seed(f,
		seed("accept", &controlv1.AcceptRequest{MachineId: machineID}),
		seed("accept.skip-wipe", &controlv1.AcceptRequest{MachineId: machineID, SkipInitialWipe: true}),
		seed("accept.unknown", &controlv1.AcceptRequest{MachineId: "4c4c4544-0000-1000-8000-00000000ffff"}),
		seed("accept.empty-id", &controlv1.AcceptRequest{}),
		seed("reject", &controlv1.RejectRequest{MachineId: machineID}),
		seed("allocate", &controlv1.AllocateRequest{MachineId: machineID, TalosVersion: "v1.9.0", Extensions: []string{"siderolabs/iscsi-tools"},
			KernelArgs: []string{"console=ttyS0"}, Config: []byte("version: v1alpha1\nmachine:\n  type: worker\n")}),
		seed("allocate.bad-version", &controlv1.AllocateRequest{MachineId: machineID, TalosVersion: "latest; rm -rf /"}),
		seed("deallocate", &controlv1.DeallocateRequest{MachineId: machineID}),
		seed("mark-installed", &controlv1.MarkInstalledRequest{MachineId: machineID}),
		seed("wipe-mode", &controlv1.SetWipeModeRequest{MachineId: machineID, Mode: "zeroes"}),
		seed("wipe-mode.bad", &controlv1.SetWipeModeRequest{MachineId: machineID, Mode: "shred"}),
		seed("kexec-mode", &controlv1.SetKexecModeRequest{MachineId: machineID, Mode: "always"}),
		seed("cordon", &controlv1.CordonRequest{MachineId: machineID}),
		seed("uncordon", &controlv1.UncordonRequest{MachineId: machineID}),
		seed("power", &controlv1.SetPowerRequest{MachineId: machineID, Power: controlv1.PowerState_POWER_STATE_OFF}),
		seed("power.bad", &controlv1.SetPowerRequest{MachineId: machineID, Power: 42}),
		seed("reboot", &controlv1.RebootRequest{MachineId: machineID}),
		seed("bmc", &controlv1.SetBMCRequest{MachineId: machineID, Kind: "ipmi", Address: "10.78.0.101", Port: 623, Username: "admin", Password: "s3cret-bmc-pw"}),
		seed("bmc.redfish", &controlv1.SetBMCRequest{MachineId: machineID, Kind: "redfish", Address: "https://10.78.0.101", Username: "root", Password: "calvin-secret", Insecure: true, SystemId: "1"}),
		seed("bmc.bad-address", &controlv1.SetBMCRequest{MachineId: machineID, Kind: "ipmi", Address: "s3cret-bmc-pw:x", Password: "s3cret-bmc-pw"}),
		seed("bmc.remove", &controlv1.SetBMCRequest{MachineId: machineID}),
		seed("labels", &controlv1.SetLabelsRequest{MachineId: machineID, Set: map[string]string{"rack": "r12", "anvil.io/pool": "gpu"}, Remove: []string{"old"}}),
		seed("labels.bad", &controlv1.SetLabelsRequest{MachineId: machineID, Set: map[string]string{"": "x", "a b": strings.Repeat("v", 300)}}),
		seed("pull", &controlv1.PullImageCacheRequest{Schematic: strings.Repeat("376567988ad370138ad8b2698212367b", 2), Version: "v1.9.0", Arch: "amd64"}),
		seed("pull.traversal", &controlv1.PullImageCacheRequest{Schematic: "../../../etc", Version: "v1.9.0/../..", Arch: "arm64"}),
		seed("pull.prerelease", &controlv1.PullImageCacheRequest{Schematic: strings.Repeat("ab", 32), Version: "v1.10.0-beta.1"}),
		seed("prune", &controlv1.PruneImageCacheRequest{OlderThanSeconds: 86400, KeepSchematics: []string{strings.Repeat("ab", 32)}}),
		seed("prune.negative", &controlv1.PruneImageCacheRequest{OlderThanSeconds: -1}),
		fuzzcorpus.E("garbage", byte(2), []byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f}),
	)

	// Added, not committed: a config over the limit is a megabyte of corpus file.
	oversize, err := proto.Marshal(&controlv1.AllocateRequest{MachineId: machineID, TalosVersion: "v1.9.0", Config: make([]byte, control.MaxConfigSize+1)})
	if err != nil {
		f.Fatal(err)
	}

	f.Add(rpcIndex("allocate"), oversize)

	st, err := resources.Open(context.Background(), f.TempDir())
	if err != nil {
		f.Fatal(err)
	}

	f.Cleanup(func() { st.Close() })

	m := resources.NewMachine(machineID)
	m.TypedSpec().UUID = machineID

	if err = st.Create(context.Background(), m); err != nil {
		f.Fatal(err)
	}

	tr := control.NewTransitions(transitions.New(st, transitions.Options{}))

	f.Fuzz(func(t *testing.T, which byte, b []byte) {
		svc := services{tr: tr, ic: control.NewImageCacheService(&pathCache{t: t})}
		r := rpcs[int(which)%len(rpcs)]

		req := r.req()
		if proto.Unmarshal(b, req) != nil {
			return // the gRPC server refuses what does not decode
		}

		resp, err := r.call(context.Background(), svc, req)
		if err != nil {
			s, ok := status.FromError(err)
			if !ok || s.Code() == codes.Unknown || s.Code() == codes.Internal {
				t.Fatalf("%s %v: %v", r.name, req, err)
			}

			if bmc, ok := req.(*controlv1.SetBMCRequest); ok && leaksPassword(bmc, err.Error()) {
				t.Fatalf("error names the BMC password: %v", err)
			}

			return
		}

		if _, err := proto.Marshal(resp); err != nil {
			t.Fatalf("%s reply does not marshal: %v", r.name, err)
		}
	})
}

// leaksPassword says whether msg holds the request's password where no other field of
// the request (which an error may quote) explains it.
func leaksPassword(req *controlv1.SetBMCRequest, msg string) bool {
	pw := req.GetPassword()
	if len(pw) < 6 || !strings.Contains(msg, pw) {
		return false
	}

	for _, field := range []string{req.GetMachineId(), req.GetKind(), req.GetAddress(), req.GetUsername(), req.GetSystemId()} {
		if strings.Contains(field, pw) {
			return false
		}
	}

	return true
}
