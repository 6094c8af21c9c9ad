package maintenance

import (
	"context"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Talos' words for how it applied a config (ApplyConfigurationResponse's mode details),
// and its refusal of a config without a machine config on a machine that has one.
const (
	appliedWithReboot    = "Applied configuration with a reboot"
	appliedWithoutReboot = "Applied configuration without a reboot"
	staged               = "Staged configuration to be applied after the next reboot"
	noV1Alpha1           = "the applied machine configuration doesn't contain v1alpha1 config, did you mean to patch the machine config instead?"
)

// ApplyConfiguration implements machine.MachineServiceServer for Talos, answering as
// Talos v1.13 does (machined's v1alpha1_server.go, checked against real Talos by the
// stand-in's replay of talos-record's recording): a config that does not load or does
// not validate for the machine (metal, installed or not) is InvalidArgument with the
// loader's or validator's own words; a running machine refuses one without a machine
// config. In maintenance REBOOT is taken as NO_REBOOT; AUTO is NO_REBOOT, since nothing
// the stand-in runs needs a reboot to take a config. Talos.Apply then does it in the
// mode answered. Not done: dry runs (Unimplemented) and Talos' runtime validation
// against the machine's resources (its disks, for an install disk selector). The
// config is never logged: it holds the cluster's secrets.
func (m *machineService) ApplyConfiguration(ctx context.Context, req *machine.ApplyConfigurationRequest) (*machine.ApplyConfigurationResponse, error) {
	if m.talos == nil || m.talos.Apply == nil {
		return nil, status.Error(codes.Unimplemented, "the machine takes no configuration")
	}

	if req.GetDryRun() {
		return nil, status.Error(codes.Unimplemented, "the stand-in does not do dry runs")
	}

	cfg, err := configloader.NewFromBytes(req.GetData())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}

	inMaintenance := m.talos.Stage == runtimeres.MachineStageMaintenance

	if !inMaintenance && cfg.RawV1Alpha1() == nil {
		return nil, status.Error(codes.InvalidArgument, noV1Alpha1)
	}

	warnings, err := cfg.Validate(metalMode{installed: !inMaintenance}) //nolint:staticcheck // Talos' own validation, as its API makes it, not a client's
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}

	mode, details := applyMode(req.GetMode(), inMaintenance)

	if err := m.talos.Apply(ctx, req.GetData(), mode); err != nil {
		return nil, status.Errorf(codes.Internal, "error applying the configuration: %v", err)
	}

	m.logger.Info("configuration applied", zap.Int("bytes", len(req.GetData())), zap.Stringer("asked", req.GetMode()), zap.Stringer("mode", mode))

	return &machine.ApplyConfigurationResponse{Messages: []*machine.ApplyConfiguration{{Mode: mode, Warnings: warnings, ModeDetails: details}}}, nil
}

// applyMode is how Talos applies a config asked for in mode, and says so.
func applyMode(mode machine.ApplyConfigurationRequest_Mode, inMaintenance bool) (machine.ApplyConfigurationRequest_Mode, string) {
	//nolint:staticcheck // REBOOT is deprecated in Talos' API, still taken
	if inMaintenance && mode == machine.ApplyConfigurationRequest_REBOOT {
		mode = machine.ApplyConfigurationRequest_NO_REBOOT
	}

	switch mode { //nolint:exhaustive // REBOOT is the default
	case machine.ApplyConfigurationRequest_TRY, machine.ApplyConfigurationRequest_NO_REBOOT:
		return mode, appliedWithoutReboot
	case machine.ApplyConfigurationRequest_STAGED:
		return mode, staged
	case machine.ApplyConfigurationRequest_AUTO:
		return machine.ApplyConfigurationRequest_NO_REBOOT, appliedWithoutReboot
	default:
		return mode, appliedWithReboot
	}
}

// metalMode is Talos' metal platform mode as its API validates configs with: an install
// required until the machine is installed.
type metalMode struct{ installed bool }

func (metalMode) String() string          { return "metal" }
func (m metalMode) RequiresInstall() bool { return !m.installed }
func (metalMode) InContainer() bool       { return false }
