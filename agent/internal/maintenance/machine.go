package maintenance

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	goruntime "runtime"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/constants"
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
}

// Version implements machine.MachineServiceServer. The agent's own version goes in
// the SHA, the build's identity in Talos' reply; the architecture is the agent's,
// which is built for the machine it runs on.
func (m *machineService) Version(context.Context, *emptypb.Empty) (*machine.VersionResponse, error) {
	return &machine.VersionResponse{
		Messages: []*machine.Version{{
			Version: &machine.VersionInfo{
				Tag:       TalosVersion,
				Sha:       m.agentVersion,
				GoVersion: goruntime.Version(),
				Os:        goruntime.GOOS,
				Arch:      goruntime.GOARCH,
			},
			Platform: &machine.PlatformInfo{Name: platformName, Mode: platformMode},
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
