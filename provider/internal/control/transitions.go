package control

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	controlv1 "github.com/anvil-metal/anvil/api/control/v1"
	"github.com/anvil-metal/anvil/provider/internal/power"
	"github.com/anvil-metal/anvil/provider/internal/resources"
	"github.com/anvil-metal/anvil/provider/internal/transitions"
	"github.com/anvil-metal/anvil/provider/internal/transitions/rpcstatus"
)

// MaxConfigSize bounds the machine config of an allocation.
const MaxConfigSize = transitions.MaxConfigSize

// Transitions is the transition service of the control API: it maps each request onto
// the transitions package and its refusals onto gRPC status codes. It holds no rule.
type Transitions struct {
	controlv1.UnimplementedTransitionServiceServer

	svc *transitions.Service
}

// NewTransitions returns the gRPC transition service over svc.
func NewTransitions(svc *transitions.Service) *Transitions { return &Transitions{svc: svc} }

// Accept implements controlv1.TransitionServiceServer.
func (t *Transitions) Accept(ctx context.Context, req *controlv1.AcceptRequest) (*controlv1.AcceptResponse, error) {
	spec, err := t.svc.AcceptWith(ctx, req.GetMachineId(), transitions.AcceptRequest{SkipWipe: req.GetSkipInitialWipe(), EK: req.GetEk()})
	if err != nil {
		return nil, rpcstatus.Of(err)
	}

	return &controlv1.AcceptResponse{Intent: intentToProto(req.GetMachineId(), spec)}, nil
}

// Reject implements controlv1.TransitionServiceServer.
func (t *Transitions) Reject(ctx context.Context, req *controlv1.RejectRequest) (*controlv1.RejectResponse, error) {
	spec, err := t.svc.Reject(ctx, req.GetMachineId())
	if err != nil {
		return nil, rpcstatus.Of(err)
	}

	return &controlv1.RejectResponse{Intent: intentToProto(req.GetMachineId(), spec)}, nil
}

// Allocate implements controlv1.TransitionServiceServer.
func (t *Transitions) Allocate(ctx context.Context, req *controlv1.AllocateRequest) (*controlv1.AllocateResponse, error) {
	spec, err := t.svc.Allocate(ctx, req.GetMachineId(), transitions.AllocationRequest{
		TalosVersion: req.GetTalosVersion(), Extensions: req.GetExtensions(), KernelArgs: req.GetKernelArgs(), Config: req.GetConfig(),
		NoDetectedExtensions: req.GetNoDetectedExtensions(), ExcludeExtensions: req.GetExcludeExtensions(),
		Owner: req.GetOwner(), InstallDisk: req.GetInstallDisk(), DryRun: req.GetDryRun(),
	})
	if err != nil {
		return nil, rpcstatus.Of(err)
	}

	return &controlv1.AllocateResponse{Intent: intentToProto(req.GetMachineId(), spec)}, nil
}

// Deallocate implements controlv1.TransitionServiceServer.
func (t *Transitions) Deallocate(ctx context.Context, req *controlv1.DeallocateRequest) (*controlv1.DeallocateResponse, error) {
	deallocate := t.svc.Deallocate
	if req.GetOwner() != "" {
		deallocate = func(ctx context.Context, id string) (*resources.MachineIntentSpec, error) {
			return t.svc.Release(ctx, id, req.GetOwner())
		}
	}

	spec, err := deallocate(ctx, req.GetMachineId())
	if err != nil {
		return nil, rpcstatus.Of(err)
	}

	return &controlv1.DeallocateResponse{Intent: intentToProto(req.GetMachineId(), spec)}, nil
}

// MarkInstalled implements controlv1.TransitionServiceServer.
func (t *Transitions) MarkInstalled(ctx context.Context, req *controlv1.MarkInstalledRequest) (*controlv1.MarkInstalledResponse, error) {
	alloc, err := t.svc.MarkInstalled(ctx, req.GetMachineId())
	if err != nil {
		return nil, rpcstatus.Of(err)
	}

	return &controlv1.MarkInstalledResponse{AllocationId: alloc}, nil
}

// SetWipeScope implements controlv1.TransitionServiceServer.
func (t *Transitions) SetWipeScope(ctx context.Context, req *controlv1.SetWipeScopeRequest) (*controlv1.SetWipeScopeResponse, error) {
	spec, err := t.svc.SetWipeScope(ctx, req.GetMachineId(), req.GetScope(), req.GetKeep())
	if err != nil {
		return nil, rpcstatus.Of(err)
	}

	return &controlv1.SetWipeScopeResponse{Intent: intentToProto(req.GetMachineId(), spec)}, nil
}

// SetWipeMode implements controlv1.TransitionServiceServer.
func (t *Transitions) SetWipeMode(ctx context.Context, req *controlv1.SetWipeModeRequest) (*controlv1.SetWipeModeResponse, error) {
	spec, err := t.svc.SetWipeMode(ctx, req.GetMachineId(), req.GetMode())
	if err != nil {
		return nil, rpcstatus.Of(err)
	}

	return &controlv1.SetWipeModeResponse{Intent: intentToProto(req.GetMachineId(), spec)}, nil
}

// SetKexecMode implements controlv1.TransitionServiceServer.
func (t *Transitions) SetKexecMode(ctx context.Context, req *controlv1.SetKexecModeRequest) (*controlv1.SetKexecModeResponse, error) {
	spec, err := t.svc.SetKexecMode(ctx, req.GetMachineId(), req.GetMode())
	if err != nil {
		return nil, rpcstatus.Of(err)
	}

	return &controlv1.SetKexecModeResponse{Intent: intentToProto(req.GetMachineId(), spec)}, nil
}

// Cordon implements controlv1.TransitionServiceServer.
func (t *Transitions) Cordon(ctx context.Context, req *controlv1.CordonRequest) (*controlv1.CordonResponse, error) {
	spec, err := t.svc.SetCordon(ctx, req.GetMachineId(), true)
	if err != nil {
		return nil, rpcstatus.Of(err)
	}

	return &controlv1.CordonResponse{Intent: intentToProto(req.GetMachineId(), spec)}, nil
}

// Uncordon implements controlv1.TransitionServiceServer.
func (t *Transitions) Uncordon(ctx context.Context, req *controlv1.UncordonRequest) (*controlv1.UncordonResponse, error) {
	spec, err := t.svc.SetCordon(ctx, req.GetMachineId(), false)
	if err != nil {
		return nil, rpcstatus.Of(err)
	}

	return &controlv1.UncordonResponse{Intent: intentToProto(req.GetMachineId(), spec)}, nil
}

// SetPower implements controlv1.TransitionServiceServer.
func (t *Transitions) SetPower(ctx context.Context, req *controlv1.SetPowerRequest) (*controlv1.SetPowerResponse, error) {
	pw, ok := powerFromProto[req.GetPower()]
	if !ok {
		return nil, status.Error(codes.InvalidArgument, "power must be on, off or default")
	}

	spec, err := t.svc.SetPower(ctx, req.GetMachineId(), pw)
	if err != nil {
		return nil, rpcstatus.Of(err)
	}

	return &controlv1.SetPowerResponse{Intent: intentToProto(req.GetMachineId(), spec)}, nil
}

// Reboot implements controlv1.TransitionServiceServer.
func (t *Transitions) Reboot(ctx context.Context, req *controlv1.RebootRequest) (*controlv1.RebootResponse, error) {
	spec, id, err := t.svc.Reboot(ctx, req.GetMachineId())
	if err != nil {
		return nil, rpcstatus.Of(err)
	}

	return &controlv1.RebootResponse{Intent: intentToProto(req.GetMachineId(), spec), RebootId: id}, nil
}

// SetBMC implements controlv1.TransitionServiceServer; an empty kind removes the BMC.
func (t *Transitions) SetBMC(ctx context.Context, req *controlv1.SetBMCRequest) (*controlv1.SetBMCResponse, error) {
	id := req.GetMachineId()

	if req.GetKind() == "" {
		if err := t.svc.RemoveBMC(ctx, id); err != nil {
			return nil, rpcstatus.Of(err)
		}

		return &controlv1.SetBMCResponse{MachineId: id}, nil
	}

	ep, err := t.svc.SetBMC(ctx, id, transitions.BMC{
		Backend: power.Backend(req.GetKind()), Address: req.GetAddress(), Port: req.GetPort(), Username: req.GetUsername(),
		Password: req.GetPassword(), Insecure: req.GetInsecure(), SystemID: req.GetSystemId(), Owner: req.GetOwner(),
	})
	if err != nil {
		return nil, rpcstatus.Of(err)
	}

	return &controlv1.SetBMCResponse{MachineId: id, Kind: string(ep.Backend), Endpoint: ep.String()}, nil
}

// SetLabels implements controlv1.TransitionServiceServer.
func (t *Transitions) SetLabels(ctx context.Context, req *controlv1.SetLabelsRequest) (*controlv1.SetLabelsResponse, error) {
	spec, err := t.svc.SetLabels(ctx, req.GetMachineId(), req.GetSet(), req.GetRemove())
	if err != nil {
		return nil, rpcstatus.Of(err)
	}

	return &controlv1.SetLabelsResponse{Intent: intentToProto(req.GetMachineId(), spec)}, nil
}
