package omni

import (
	"context"
	"fmt"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/omni/client/api/omni/specs"
	"github.com/siderolabs/omni/client/pkg/omni/resources"
	"github.com/siderolabs/omni/client/pkg/omni/resources/infra"
	omnires "github.com/siderolabs/omni/client/pkg/omni/resources/omni"
	"go.uber.org/zap"

	omniadapterv1 "github.com/anvil-metal/anvil/api/omniadapter/v1"
)

// MachineSink is what the provider takes of Omni's machines: the adapter API's client.
type MachineSink interface {
	ApplyMachine(ctx context.Context, m *omniadapterv1.OmniMachine) error
	ForgetMachine(ctx context.Context, id string) error
}

// FollowMachines hands every infra.Machine of the provider in Omni to sink, then each
// change, until ctx is done or a call fails (the caller starts it again, which sends
// every machine again: the provider's view is rebuilt from Omni's on every start).
// Omni labels the infra.Machines of a static provider with its ID.
func FollowMachines(ctx context.Context, st state.State, providerID string, sink MachineSink, logger *zap.Logger) error {
	events := make(chan state.Event)

	if err := st.WatchKind(ctx, resource.NewMetadata(resources.InfraProviderNamespace, infra.InfraMachineType, "", resource.VersionUndefined), events,
		state.WithBootstrapContents(true),
		state.WatchWithLabelQuery(resource.LabelEqual(omnires.LabelInfraProviderID, providerID)),
	); err != nil {
		return fmt.Errorf("error watching the infra machines: %w", err)
	}

	for {
		var ev state.Event

		select {
		case <-ctx.Done():
			return nil
		case ev = <-events:
		}

		switch ev.Type {
		case state.Created, state.Updated:
			m, ok := ev.Resource.(*infra.Machine)
			if !ok {
				return fmt.Errorf("an infra machine is a %T", ev.Resource)
			}

			callCtx, cancel := context.WithTimeout(ctx, pushTimeout)
			err := sink.ApplyMachine(callCtx, omniMachine(m))

			cancel()

			if err != nil {
				return fmt.Errorf("error handing machine %s to the provider: %w", m.Metadata().ID(), err)
			}
		case state.Destroyed:
			callCtx, cancel := context.WithTimeout(ctx, pushTimeout)
			err := sink.ForgetMachine(callCtx, ev.Resource.Metadata().ID())

			cancel()

			if err != nil {
				return fmt.Errorf("error telling the provider machine %s is gone: %w", ev.Resource.Metadata().ID(), err)
			}
		case state.Bootstrapped:
			logger.Info("Omni: every infra machine handed to the provider")
		case state.Errored:
			return fmt.Errorf("the infra machine watch failed: %w", ev.Error)
		case state.Noop:
		}
	}
}

// omniMachine is the adapter API's form of Omni's infra.Machine.
func omniMachine(m *infra.Machine) *omniadapterv1.OmniMachine {
	spec := m.TypedSpec().Value

	out := &omniadapterv1.OmniMachine{
		Id:                  m.Metadata().ID(),
		ClusterTalosVersion: spec.GetClusterTalosVersion(),
		Extensions:          spec.GetExtensions(),
		ExtraKernelArgs:     spec.GetExtraKernelArgs(),
		WipeId:              spec.GetWipeId(),
		InstallEventId:      spec.GetInstallEventId(),
		RequestedRebootId:   spec.GetRequestedRebootId(),
		PowerOffRequestId:   spec.GetPowerOffRequestId(),
		Cordoned:            spec.GetCordoned(),
		NodeUniqueToken:     spec.GetNodeUniqueToken(),
	}

	switch spec.GetAcceptanceStatus() {
	case specs.InfraMachineConfigSpec_ACCEPTED:
		out.Acceptance = omniadapterv1.OmniMachine_ACCEPTANCE_ACCEPTED
	case specs.InfraMachineConfigSpec_REJECTED:
		out.Acceptance = omniadapterv1.OmniMachine_ACCEPTANCE_REJECTED
	default:
		out.Acceptance = omniadapterv1.OmniMachine_ACCEPTANCE_PENDING
	}

	if spec.GetPreferredPowerState() == specs.InfraMachineSpec_POWER_STATE_ON {
		out.PreferredPower = omniadapterv1.OmniMachine_POWER_ON
	}

	return out
}

// adapterSink is MachineSink over the adapter API.
type adapterSink struct {
	client omniadapterv1.OmniAdapterServiceClient
}

func (s adapterSink) ApplyMachine(ctx context.Context, m *omniadapterv1.OmniMachine) error {
	_, err := s.client.ApplyMachine(ctx, &omniadapterv1.ApplyMachineRequest{Machine: m})

	return err
}

func (s adapterSink) ForgetMachine(ctx context.Context, id string) error {
	_, err := s.client.ForgetMachine(ctx, &omniadapterv1.ForgetMachineRequest{Id: id})

	return err
}

// followMachines hands Omni's machines to the provider over the socket it serves the
// adapter on.
func (c *Connection) followMachines(ctx context.Context) error {
	client, closeConn, err := c.providerClient()
	if err != nil {
		return err
	}

	defer closeConn()

	return FollowMachines(ctx, c.st, c.opts.ProviderID, adapterSink{client: client}, c.opts.Logger)
}
