package control

import (
	"context"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/state"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// ErrReadOnly is returned for every write through the state API. It carries the gRPC
// code PermissionDenied, so the state server passes it to clients as is.
var ErrReadOnly error = readOnlyError{}

type readOnlyError struct{}

func (readOnlyError) Error() string {
	return "the state API is read-only: writes go through the transition service"
}

// GRPCStatus lets gRPC report the error as PermissionDenied rather than Unknown.
func (e readOnlyError) GRPCStatus() *status.Status {
	return status.New(codes.PermissionDenied, e.Error())
}

// ReadOnly returns a view of st that reads and watches but refuses every write, so the
// state API cannot bypass the validated transitions.
func ReadOnly(st state.State) state.State {
	return readOnly{State: st}
}

// readOnly embeds the state for reads and overrides every method that writes.
type readOnly struct {
	state.State
}

func (readOnly) Create(context.Context, resource.Resource, ...state.CreateOption) error {
	return ErrReadOnly
}

func (readOnly) Update(context.Context, resource.Resource, ...state.UpdateOption) error {
	return ErrReadOnly
}

func (readOnly) Destroy(context.Context, resource.Pointer, ...state.DestroyOption) error {
	return ErrReadOnly
}

func (readOnly) UpdateWithConflicts(context.Context, resource.Pointer, state.UpdaterFunc, ...state.UpdateOption) (resource.Resource, error) {
	return nil, ErrReadOnly
}

func (readOnly) Teardown(context.Context, resource.Pointer, ...state.TeardownOption) (bool, error) {
	return false, ErrReadOnly
}

func (readOnly) TeardownAndDestroy(context.Context, resource.Pointer, ...state.TeardownAndDestroyOption) error {
	return ErrReadOnly
}

func (readOnly) AddFinalizer(context.Context, resource.Pointer, ...resource.Finalizer) error {
	return ErrReadOnly
}

func (readOnly) RemoveFinalizer(context.Context, resource.Pointer, ...resource.Finalizer) error {
	return ErrReadOnly
}

func (readOnly) Modify(context.Context, resource.Resource, func(resource.Resource) error, ...state.UpdateOption) error {
	return ErrReadOnly
}

func (readOnly) ModifyWithResult(context.Context, resource.Resource, func(resource.Resource) error, ...state.UpdateOption) (resource.Resource, error) {
	return nil, ErrReadOnly
}

// secretTypes are never served: a BMC password is for the provider's own use.
var secretTypes = map[resource.Type]bool{resources.BMCSecretType: true}

func refuseSecret(kind resource.Kind) error {
	if secretTypes[kind.Type()] {
		return status.Errorf(codes.PermissionDenied, "%s is not served: it holds secrets", kind.Type())
	}

	return nil
}

func (r readOnly) Get(ctx context.Context, ptr resource.Pointer, opts ...state.GetOption) (resource.Resource, error) {
	if err := refuseSecret(ptr); err != nil {
		return nil, err
	}

	return r.State.Get(ctx, ptr, opts...)
}

func (r readOnly) List(ctx context.Context, kind resource.Kind, opts ...state.ListOption) (resource.List, error) {
	if err := refuseSecret(kind); err != nil {
		return resource.List{}, err
	}

	return r.State.List(ctx, kind, opts...)
}

func (r readOnly) Watch(ctx context.Context, ptr resource.Pointer, ch chan<- state.Event, opts ...state.WatchOption) error {
	if err := refuseSecret(ptr); err != nil {
		return err
	}

	return r.State.Watch(ctx, ptr, ch, opts...)
}

func (r readOnly) WatchKind(ctx context.Context, kind resource.Kind, ch chan<- state.Event, opts ...state.WatchKindOption) error {
	if err := refuseSecret(kind); err != nil {
		return err
	}

	return r.State.WatchKind(ctx, kind, ch, opts...)
}

func (r readOnly) WatchKindAggregated(ctx context.Context, kind resource.Kind, ch chan<- []state.Event, opts ...state.WatchKindOption) error {
	if err := refuseSecret(kind); err != nil {
		return err
	}

	return r.State.WatchKindAggregated(ctx, kind, ch, opts...)
}
