package omnilink

import (
	"context"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	omniadapterv1 "github.com/anvil-metal/anvil/api/omniadapter/v1"
	"github.com/anvil-metal/anvil/provider/internal/power"
	"github.com/anvil-metal/anvil/provider/internal/transitions"
	"github.com/anvil-metal/anvil/provider/internal/transitions/rpcstatus"
)

// SetBMC implements omniadapterv1.OmniAdapterServiceServer: the BMC an admin gave in
// Omni becomes the machine's, as if given locally (a user's BMC: the agent never
// replaces its credentials). The password is never logged nor echoed in an error.
func (l *Link) SetBMC(ctx context.Context, req *omniadapterv1.SetBMCRequest) (*omniadapterv1.SetBMCResponse, error) {
	if l.bmcs == nil {
		return nil, status.Error(codes.Unavailable, "the provider takes no BMCs from Omni")
	}

	var bmc transitions.BMC

	switch b := req.GetBmc().(type) {
	case *omniadapterv1.SetBMCRequest_Ipmi:
		bmc = transitions.BMC{
			Backend: power.BackendIPMI, Address: b.Ipmi.GetAddress(), Port: b.Ipmi.GetPort(),
			Username: b.Ipmi.GetUsername(), Password: b.Ipmi.GetPassword(),
		}
	case *omniadapterv1.SetBMCRequest_Api:
		bmc = transitions.BMC{Backend: power.BackendAPI, Address: b.Api.GetAddress()}
	default:
		return nil, status.Error(codes.InvalidArgument, "a BMC is IPMI or API")
	}

	ep, err := l.bmcs.SetBMC(ctx, req.GetId(), bmc)
	if err != nil {
		return nil, rpcstatus.Of(err)
	}

	l.logger.Info("BMC given in Omni", zap.String("machine", req.GetId()), zap.String("backend", string(ep.Backend)),
		zap.String("address", ep.Address), zap.String("user", ep.Username))

	return &omniadapterv1.SetBMCResponse{}, nil
}
