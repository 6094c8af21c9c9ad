package omnilink

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/state"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	omniadapterv1 "github.com/anvil-metal/anvil/api/omniadapter/v1"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// WatchMachineStatuses implements omniadapterv1.OmniAdapterServiceServer: every
// OmniMachineStatus, then each change, until the adapter goes. A watch that falls
// behind the state's history ends the stream: the adapter watches again and gets every
// status anew.
func (l *Link) WatchMachineStatuses(_ *omniadapterv1.WatchMachineStatusesRequest, stream omniadapterv1.OmniAdapterService_WatchMachineStatusesServer) error {
	if l.st == nil {
		return status.Error(codes.Unavailable, "the provider keeps no Omni view of machines")
	}

	ctx := stream.Context()
	events := make(chan state.Event)

	if err := l.st.WatchKind(ctx, resource.NewMetadata(resources.NamespaceName, resources.OmniMachineStatusType, "", resource.VersionUndefined), events,
		state.WithBootstrapContents(true)); err != nil {
		return status.Error(codes.Internal, fmt.Sprintf("error watching the Omni statuses: %v", err))
	}

	for {
		var ev state.Event

		select {
		case <-ctx.Done():
			return nil
		case ev = <-events:
		}

		var out *omniadapterv1.MachineStatusEvent

		switch ev.Type {
		case state.Created, state.Updated:
			s, ok := ev.Resource.(*resources.OmniMachineStatus)
			if !ok {
				return status.Error(codes.Internal, fmt.Sprintf("an Omni status is a %T", ev.Resource))
			}

			out = &omniadapterv1.MachineStatusEvent{Status: machineStatus(s)}
		case state.Destroyed:
			out = &omniadapterv1.MachineStatusEvent{Status: &omniadapterv1.MachineStatus{Id: ev.Resource.Metadata().ID()}, Removed: true}
		case state.Errored:
			return status.Error(codes.Aborted, fmt.Sprintf("the Omni status watch ended: %v", ev.Error))
		case state.Bootstrapped, state.Noop:
			continue
		}

		if err := stream.Send(out); err != nil {
			if errors.Is(ctx.Err(), context.Canceled) {
				return nil
			}

			return err
		}
	}
}

// machineStatus is the adapter API's form of an OmniMachineStatus.
func machineStatus(r *resources.OmniMachineStatus) *omniadapterv1.MachineStatus {
	s := r.TypedSpec()

	out := &omniadapterv1.MachineStatus{
		Id:                   r.Metadata().ID(),
		ReadyToUse:           s.ReadyToUse,
		Installed:            s.Installed,
		LastRebootId:         s.LastRebootID,
		LastPowerOffId:       s.LastPowerOffID,
		WipedNodeUniqueToken: s.WipedNodeUniqueToken,
		Labels:               maps.Clone(s.Labels),
	}

	if !s.LastRebootAt.IsZero() {
		out.LastRebootUnixNano = s.LastRebootAt.UnixNano()
	}

	switch s.Power {
	case resources.PowerOn:
		out.Power = omniadapterv1.MachineStatus_POWER_ON
	case resources.PowerOff:
		out.Power = omniadapterv1.MachineStatus_POWER_OFF
	default:
		out.Power = omniadapterv1.MachineStatus_POWER_UNKNOWN
	}

	return out
}
