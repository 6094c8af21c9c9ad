package omnilink

import (
	"context"
	"fmt"
	"reflect"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	omniadapterv1 "github.com/anvil-metal/anvil/api/omniadapter/v1"
	"github.com/anvil-metal/anvil/provider/internal/resources"
	"github.com/anvil-metal/anvil/provider/internal/transitions"
)

// ApplyMachine implements omniadapterv1.OmniAdapterServiceServer: Omni's view of the
// machine becomes its OmniMachine, which the Omni intent controller carries out. What
// is malformed is refused and nothing is written.
func (l *Link) ApplyMachine(ctx context.Context, req *omniadapterv1.ApplyMachineRequest) (*omniadapterv1.ApplyMachineResponse, error) {
	if l.st == nil {
		return nil, status.Error(codes.Unavailable, "the provider keeps no Omni view of machines")
	}

	m := req.GetMachine()
	if m == nil {
		return nil, status.Error(codes.InvalidArgument, "no machine")
	}

	spec, err := specOf(m)
	if err == nil {
		err = transitions.ValidateOmni(m.GetId(), spec)
	}

	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}

	changed := false

	if err := safe.StateModify(ctx, l.writer(), resources.NewOmniMachine(m.GetId()), func(om *resources.OmniMachine) error {
		changed = !reflect.DeepEqual(*om.TypedSpec(), spec)
		*om.TypedSpec() = spec

		// Before it is stored, so that no controller carries it out unseen.
		if changed {
			l.lag.Arrived(m.GetId())
		}

		return nil
	}); err != nil {
		return nil, status.Error(codes.Internal, fmt.Sprintf("error storing Omni's view of machine %s: %v", m.GetId(), err))
	}

	if changed {
		// The node unique token is never logged: it lets a machine join as this one.
		l.logger.Info("Omni's decisions for a machine", zap.String("machine", m.GetId()),
			zap.String("acceptance", string(spec.Acceptance)), zap.String("talos_version", spec.ClusterTalosVersion),
			zap.String("preferred_power", string(spec.PreferredPower)), zap.String("wipe_id", spec.WipeID),
			zap.Uint64("install_event_id", spec.InstallEventID))
	}

	return &omniadapterv1.ApplyMachineResponse{}, nil
}

// ForgetMachine implements omniadapterv1.OmniAdapterServiceServer: Omni no longer has
// the machine, so it is pending again (as a machine Omni never accepted): its OmniMachine
// says gone, and the Omni intent controller makes that its intent. Returning is the
// provider's word that this is stored: the adapter then lets Omni drop the machine.
func (l *Link) ForgetMachine(ctx context.Context, req *omniadapterv1.ForgetMachineRequest) (*omniadapterv1.ForgetMachineResponse, error) {
	if l.st == nil {
		return nil, status.Error(codes.Unavailable, "the provider keeps no Omni view of machines")
	}

	gone := resources.OmniMachineSpec{Acceptance: resources.AcceptancePending, Gone: true}

	if err := transitions.ValidateOmni(req.GetId(), gone); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}

	_, err := safe.StateUpdateWithConflicts(ctx, l.writer(), resources.NewOmniMachine(req.GetId()).Metadata(), func(om *resources.OmniMachine) error {
		*om.TypedSpec() = gone

		return nil
	})

	switch {
	case state.IsNotFoundError(err):
		// Never reported: nothing of Omni's to forget.
	case err != nil:
		return nil, status.Error(codes.Internal, fmt.Sprintf("error forgetting Omni's view of machine %s: %v", req.GetId(), err))
	default:
		l.logger.Info("Omni no longer has the machine: it is pending", zap.String("machine", req.GetId()))
	}

	return &omniadapterv1.ForgetMachineResponse{}, nil
}

// specOf reads the adapter's message.
func specOf(m *omniadapterv1.OmniMachine) (resources.OmniMachineSpec, error) {
	spec := resources.OmniMachineSpec{
		ClusterTalosVersion: m.GetClusterTalosVersion(),
		Extensions:          m.GetExtensions(),
		ExtraKernelArgs:     m.GetExtraKernelArgs(),
		WipeID:              m.GetWipeId(),
		InstallEventID:      m.GetInstallEventId(),
		RequestedRebootID:   m.GetRequestedRebootId(),
		PowerOffRequestID:   m.GetPowerOffRequestId(),
		Cordoned:            m.GetCordoned(),
		NodeUniqueToken:     m.GetNodeUniqueToken(),
	}

	switch m.GetAcceptance() {
	case omniadapterv1.OmniMachine_ACCEPTANCE_PENDING:
		spec.Acceptance = resources.AcceptancePending
	case omniadapterv1.OmniMachine_ACCEPTANCE_ACCEPTED:
		spec.Acceptance = resources.AcceptanceAccepted
	case omniadapterv1.OmniMachine_ACCEPTANCE_REJECTED:
		spec.Acceptance = resources.AcceptanceRejected
	default:
		return spec, fmt.Errorf("machine %s: unknown acceptance %d", m.GetId(), m.GetAcceptance())
	}

	switch m.GetPreferredPower() {
	case omniadapterv1.OmniMachine_POWER_OFF:
		spec.PreferredPower = resources.PowerOff
	case omniadapterv1.OmniMachine_POWER_ON:
		spec.PreferredPower = resources.PowerOn
	default:
		return spec, fmt.Errorf("machine %s: unknown preferred power state %d", m.GetId(), m.GetPreferredPower())
	}

	return spec, nil
}
