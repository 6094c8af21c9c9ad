package maintenance

import (
	"context"
	"errors"
	"io/fs"
	"math"
	"os"
	"path"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"sync"

	"github.com/google/uuid"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/anvil-metal/anvil/internal/talosversion"
)

// TalosVersion is the Talos version the agent reports: talosversion.Tag, which
// SideroLink's Provision is told too, since Omni reads both as the machine's Talos
// version (the reasons for its value are there).
const TalosVersion = talosversion.Tag

// BootIDPath is the one file Read serves: Omni reads it to notice reboots.
const BootIDPath = "/proc/sys/kernel/random/boot_id"

// Talos' platform name and its agent mode, as Talos in agent mode reports them.
const (
	platformName = constants.PlatformMetal
	platformMode = "metal-agent"
)

// machineService is Talos' MachineService with what Omni calls on a machine in
// maintenance mode; every other method answers Unimplemented.
type machineService struct {
	machine.UnimplementedMachineServiceServer

	agentVersion string
	procRoot     string
	talos        *Talos
	logger       *zap.Logger

	// deleted are the META keys of talos.Meta deleted since the start.
	mu      sync.Mutex
	deleted map[uint8]bool
}

// Version implements machine.MachineServiceServer. The agent's own version goes in
// the SHA, the build's identity in Talos' reply; the architecture is the agent's,
// which is built for the machine it runs on.
func (m *machineService) Version(context.Context, *emptypb.Empty) (*machine.VersionResponse, error) {
	tag, mode := TalosVersion, platformMode

	var features *machine.FeaturesInfo

	if m.talos != nil {
		// Talos names its mode as its platform does (metal); it tells its features once
		// it has a machine config, which a running machine has.
		tag, mode = m.talos.Version, platformName
		if m.talos.Stage != runtimeres.MachineStageMaintenance {
			features = &machine.FeaturesInfo{Rbac: true}
		}
	}

	return &machine.VersionResponse{
		Messages: []*machine.Version{{
			Version: &machine.VersionInfo{
				Tag:       tag,
				Sha:       m.agentVersion,
				GoVersion: goruntime.Version(),
				Os:        goruntime.GOOS,
				Arch:      goruntime.GOARCH,
			},
			Platform: &machine.PlatformInfo{Name: platformName, Mode: mode},
			Features: features,
		}},
	}, nil
}

// Read implements machine.MachineServiceServer for BootIDPath only: the API
// answers anyone on the tunnel without authentication, so it hands out nothing
// else of the machine's files.
func (m *machineService) Read(req *machine.ReadRequest, srv grpc.ServerStreamingServer[common.Data]) error {
	if req.GetPath() == "" || path.Clean(req.GetPath()) != BootIDPath {
		return status.Errorf(codes.PermissionDenied, "only %s is served", BootIDPath)
	}

	b, err := os.ReadFile(filepath.Join(m.procRoot, "sys", "kernel", "random", "boot_id"))

	switch {
	case errors.Is(err, fs.ErrNotExist):
		return status.Errorf(codes.NotFound, "%s: %v", BootIDPath, err)
	case err != nil:
		return status.Errorf(codes.Internal, "%s: %v", BootIDPath, err)
	}

	// As Talos does, the file as it is, newline included, in one chunk: it is 37 bytes.
	return srv.Send(&common.Data{Bytes: b})
}

// MetaDelete implements machine.MachineServiceServer for a resettable Talos: a key of
// Talos.Meta is deleted once (Omni deletes the state encryption key before a reset),
// any other is NotFound, which Omni takes as "nothing to delete", in Talos' words.
func (m *machineService) MetaDelete(_ context.Context, req *machine.MetaDeleteRequest) (*machine.MetaDeleteResponse, error) {
	if m.talos == nil || m.talos.Reset == nil {
		return nil, status.Error(codes.Unimplemented, "the machine has no META")
	}

	if req.GetKey() > math.MaxUint8 {
		return nil, status.Error(codes.InvalidArgument, "key must be a uint8")
	}

	key := uint8(req.GetKey()) //nolint:gosec // ≤ MaxUint8, checked above

	m.mu.Lock()
	defer m.mu.Unlock()

	if !slices.Contains(m.talos.Meta, key) || m.deleted[key] {
		return nil, status.Error(codes.NotFound, "meta key not found")
	}

	if m.deleted == nil {
		m.deleted = map[uint8]bool{}
	}

	m.deleted[key] = true

	return &machine.MetaDeleteResponse{Messages: []*machine.MetaDelete{{}}}, nil
}

// Reset implements machine.MachineServiceServer for Talos (talosctl reset, and the
// machinery client's ResetGeneric, which Omni calls): Talos.Reset does it.
func (m *machineService) Reset(ctx context.Context, req *machine.ResetRequest) (*machine.ResetResponse, error) {
	if m.talos == nil || m.talos.Reset == nil {
		return nil, status.Error(codes.Unimplemented, "the machine cannot be reset through this API")
	}

	// As Talos, the reset is an actor: its ID is in the answer and on the events the
	// reset sends, so a caller can follow them.
	actor := uuid.NewString()

	if err := m.talos.Reset(ctx, req, actor); err != nil {
		return nil, status.Errorf(codes.Internal, "error resetting the machine: %v", err)
	}

	m.logger.Info("reset", zap.Bool("graceful", req.GetGraceful()), zap.Bool("reboot", req.GetReboot()), zap.String("actor", actor))

	return &machine.ResetResponse{Messages: []*machine.Reset{{ActorId: actor}}}, nil
}

// EtcdForfeitLeadership implements machine.MachineServiceServer for a resettable Talos:
// it runs no etcd, so it leads nothing (Omni asks a control plane before a reset).
func (m *machineService) EtcdForfeitLeadership(context.Context, *machine.EtcdForfeitLeadershipRequest) (*machine.EtcdForfeitLeadershipResponse, error) {
	if m.talos == nil || m.talos.Reset == nil {
		return nil, status.Error(codes.Unimplemented, "the machine runs no etcd")
	}

	return &machine.EtcdForfeitLeadershipResponse{Messages: []*machine.EtcdForfeitLeadership{{}}}, nil
}

// EtcdLeaveCluster implements machine.MachineServiceServer for a resettable Talos: it
// runs no etcd, so there is no member to remove.
func (m *machineService) EtcdLeaveCluster(context.Context, *machine.EtcdLeaveClusterRequest) (*machine.EtcdLeaveClusterResponse, error) {
	if m.talos == nil || m.talos.Reset == nil {
		return nil, status.Error(codes.Unimplemented, "the machine runs no etcd")
	}

	return &machine.EtcdLeaveClusterResponse{Messages: []*machine.EtcdLeaveCluster{{}}}, nil
}
