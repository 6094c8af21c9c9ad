package omni

import (
	"context"
	"errors"
	"fmt"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/omni/client/api/omni/specs"
	"github.com/siderolabs/omni/client/pkg/omni/resources"
	"github.com/siderolabs/omni/client/pkg/omni/resources/infra"
	omnires "github.com/siderolabs/omni/client/pkg/omni/resources/omni"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	omniadapterv1 "github.com/anvil-metal/anvil/api/omniadapter/v1"
)

// MachineSink is what the provider takes of Omni's machines: the adapter API's client.
type MachineSink interface {
	ApplyMachine(ctx context.Context, m *omniadapterv1.OmniMachine) error
	ForgetMachine(ctx context.Context, id string) error
	SetBMC(ctx context.Context, req *omniadapterv1.SetBMCRequest) error
}

// FollowBMCs hands every BMC an admin gave in Omni for the provider's machines
// (infra.BMCConfig) to sink, then each change, as FollowMachines does. A BMC config
// removed in Omni leaves the machine's BMC as it was (anvilctl machine bmc removes it).
func FollowBMCs(ctx context.Context, st state.State, providerID string, sink MachineSink, logger *zap.Logger) error {
	return follow(ctx, st, infra.BMCConfigType, providerID, logger, "BMC config",
		func(ctx context.Context, c *infra.BMCConfig) error {
			req, err := bmcRequest(c)
			if err != nil {
				logger.Warn("Omni: a BMC config the provider cannot use", zap.String("machine", c.Metadata().ID()), zap.Error(err))

				return nil
			}

			return sink.SetBMC(ctx, req)
		}, nil)
}

// bmcRequest is the adapter API's form of an infra.BMCConfig.
func bmcRequest(c *infra.BMCConfig) (*omniadapterv1.SetBMCRequest, error) {
	cfg := c.TypedSpec().Value.GetConfig()
	req := &omniadapterv1.SetBMCRequest{Id: c.Metadata().ID()}

	switch {
	case cfg.GetIpmi() != nil:
		i := cfg.GetIpmi()
		req.Bmc = &omniadapterv1.SetBMCRequest_Ipmi{Ipmi: &omniadapterv1.SetBMCRequest_IPMI{
			Address: i.GetAddress(), Port: i.GetPort(), Username: i.GetUsername(), Password: i.GetPassword(),
		}}
	case cfg.GetApi() != nil:
		req.Bmc = &omniadapterv1.SetBMCRequest_Api{Api: &omniadapterv1.SetBMCRequest_API{Address: cfg.GetApi().GetAddress()}}
	default:
		return nil, errors.New("neither IPMI nor API")
	}

	return req, nil
}

// FollowMachines hands every infra.Machine of the provider in Omni to sink, then each
// change, until ctx is done or a call fails (the caller starts it again, which sends
// every machine again: the provider's view is rebuilt from Omni's on every start).
// Omni labels the infra.Machines of a static provider with its ID.
//
// The provider's finalizer on each infra.Machine holds Omni's removal of it until the
// provider has stored that the machine is gone (pending again): a machine Omni drops is
// never left in a cluster's state on this side.
func FollowMachines(ctx context.Context, st state.State, providerID string, sink MachineSink, logger *zap.Logger) error {
	finalizer := Finalizer(providerID)

	return follow(ctx, st, infra.InfraMachineType, providerID, logger, "infra machine",
		func(ctx context.Context, m *infra.Machine) error {
			if m.Metadata().Phase() == resource.PhaseTearingDown {
				if err := sink.ForgetMachine(ctx, m.Metadata().ID()); err != nil {
					return err
				}

				return ignoreNotFound(st.RemoveFinalizer(ctx, m.Metadata(), finalizer))
			}

			if !m.Metadata().Finalizers().Has(finalizer) {
				if err := st.AddFinalizer(ctx, m.Metadata(), finalizer); err != nil {
					return ignoreNotFound(err)
				}
			}

			return sink.ApplyMachine(ctx, omniMachine(m))
		},
		sink.ForgetMachine)
}

// Finalizer is the provider's finalizer on the infra.Machines it serves.
func Finalizer(providerID string) string { return "anvil.dev/" + providerID }

// ignoreNotFound: a resource gone meanwhile is no failure (its destruction is followed).
func ignoreNotFound(err error) error {
	if state.IsNotFoundError(err) {
		return nil
	}

	return err
}

// follow watches the resources of type typ that Omni labels as the provider's, calling
// set for each (every one first, then each change) and gone for each one destroyed,
// until ctx is done (nil) or a call or the watch fails.
func follow[T resource.Resource](ctx context.Context, st state.State, typ resource.Type, providerID string, logger *zap.Logger, what string,
	set func(context.Context, T) error, gone func(context.Context, string) error,
) error {
	events := make(chan state.Event)

	if err := st.WatchKind(ctx, resource.NewMetadata(resources.InfraProviderNamespace, typ, "", resource.VersionUndefined), events,
		state.WithBootstrapContents(true),
		state.WatchWithLabelQuery(resource.LabelEqual(omnires.LabelInfraProviderID, providerID)),
	); err != nil {
		return fmt.Errorf("error watching the %ss: %w", what, err)
	}

	for {
		var ev state.Event

		select {
		case <-ctx.Done():
			return nil
		case ev = <-events:
		}

		id := ""
		if ev.Resource != nil {
			id = ev.Resource.Metadata().ID()
		}

		callCtx, cancel := context.WithTimeout(ctx, pushTimeout)

		var err error

		switch ev.Type {
		case state.Created, state.Updated:
			r, ok := ev.Resource.(T)
			if !ok {
				cancel()

				return fmt.Errorf("an %s is a %T", what, ev.Resource)
			}

			err = set(callCtx, r)
		case state.Destroyed:
			if gone != nil {
				err = gone(callCtx, id)
			}
		case state.Bootstrapped:
			logger.Info("Omni: every " + what + " handed to the provider")
		case state.Errored:
			err = fmt.Errorf("the %s watch failed: %w", what, ev.Error)
		case state.Noop:
		}

		cancel()

		if err != nil {
			return fmt.Errorf("%s %s: %w", what, id, err)
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

func (s adapterSink) SetBMC(ctx context.Context, req *omniadapterv1.SetBMCRequest) error {
	_, err := s.client.SetBMC(ctx, req)

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

	sink := adapterSink{client: client}

	eg, ctx := errgroup.WithContext(ctx)
	eg.Go(func() error { return FollowMachines(ctx, c.st, c.opts.ProviderID, sink, c.opts.Logger) })
	eg.Go(func() error { return FollowBMCs(ctx, c.st, c.opts.ProviderID, sink, c.opts.Logger) })

	return eg.Wait()
}
