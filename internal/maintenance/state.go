package maintenance

import (
	"context"
	"strings"

	"github.com/cosi-project/runtime/api/v1alpha1"
	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/resource/meta"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/cosi-project/runtime/pkg/state/protobuf/server"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// errReadOnly answers every write: the state is the agent's account of the machine,
// which no client changes.
var errReadOnly = status.Error(codes.PermissionDenied, "the maintenance API is read-only")

// servedState is the agent's state as the API shows it: read-only, and only the
// types whose resource definitions it lists in meta (and meta's own), each in its
// definition's namespace. Omni lists the definitions first and fails its whole
// collection on a listed type it cannot read, so what is listed and what is served
// must be the same set; deriving the one from the other keeps them so. Anything
// else is NotFound, which is also what Omni expects for the types an agent does not
// have (SystemDisks, SecurityState, the machine config).
type servedState struct {
	st state.State
}

// served returns nil when kind's type is served in kind's namespace, else a
// NotFound status.
func (s servedState) served(ctx context.Context, kind resource.Kind) error {
	ns, typ := kind.Namespace(), kind.Type()

	if ns == meta.NamespaceName && (typ == meta.ResourceDefinitionType || typ == meta.NamespaceType) {
		return nil
	}

	rd, err := safe.StateGetByID[*meta.ResourceDefinition](ctx, s.st, strings.ToLower(typ))

	switch {
	case state.IsNotFoundError(err):
		return status.Errorf(codes.NotFound, "resource type %q is not served", typ)
	case err != nil:
		return status.Errorf(codes.Internal, "error reading the definition of %q: %v", typ, err)
	case rd.TypedSpec().DefaultNamespace != ns:
		return status.Errorf(codes.NotFound, "resource type %q is not served in namespace %q (it is in %q)", typ, ns, rd.TypedSpec().DefaultNamespace)
	}

	return nil
}

// Get implements state.CoreState.
func (s servedState) Get(ctx context.Context, ptr resource.Pointer, opts ...state.GetOption) (resource.Resource, error) {
	if err := s.served(ctx, ptr); err != nil {
		return nil, err
	}

	return s.st.Get(ctx, ptr, opts...)
}

// List implements state.CoreState.
func (s servedState) List(ctx context.Context, kind resource.Kind, opts ...state.ListOption) (resource.List, error) {
	if err := s.served(ctx, kind); err != nil {
		return resource.List{}, err
	}

	return s.st.List(ctx, kind, opts...)
}

// Watch implements state.CoreState.
func (s servedState) Watch(ctx context.Context, ptr resource.Pointer, ch chan<- state.Event, opts ...state.WatchOption) error {
	if err := s.served(ctx, ptr); err != nil {
		return err
	}

	return s.st.Watch(ctx, ptr, ch, opts...)
}

// WatchKind implements state.CoreState.
func (s servedState) WatchKind(ctx context.Context, kind resource.Kind, ch chan<- state.Event, opts ...state.WatchKindOption) error {
	if err := s.served(ctx, kind); err != nil {
		return err
	}

	return s.st.WatchKind(ctx, kind, ch, opts...)
}

// WatchKindAggregated implements state.CoreState.
func (s servedState) WatchKindAggregated(ctx context.Context, kind resource.Kind, ch chan<- []state.Event, opts ...state.WatchKindOption) error {
	if err := s.served(ctx, kind); err != nil {
		return err
	}

	return s.st.WatchKindAggregated(ctx, kind, ch, opts...)
}

// Create implements state.CoreState: refused.
func (servedState) Create(context.Context, resource.Resource, ...state.CreateOption) error {
	return errReadOnly
}

// Update implements state.CoreState: refused.
func (servedState) Update(context.Context, resource.Resource, ...state.UpdateOption) error {
	return errReadOnly
}

// Destroy implements state.CoreState: refused.
func (servedState) Destroy(context.Context, resource.Pointer, ...state.DestroyOption) error {
	return errReadOnly
}

// stateServer is COSI's state server over the served state, with what it lacks for
// requests from the network: label queries are checked before COSI's converter
// indexes their values (an empty one would panic it, and the agent is PID 1), and
// writes are refused before their payload is decoded.
type stateServer struct {
	*server.State
}

func newStateServer(st state.State) *stateServer {
	return &stateServer{State: server.NewState(servedState{st: st})}
}

// List implements v1alpha1.StateServer.
func (s *stateServer) List(req *v1alpha1.ListRequest, srv grpc.ServerStreamingServer[v1alpha1.ListResponse]) error {
	if err := checkLabelQueries(req.GetOptions().GetLabelQuery()); err != nil {
		return err
	}

	return s.State.List(req, srv)
}

// Watch implements v1alpha1.StateServer.
func (s *stateServer) Watch(req *v1alpha1.WatchRequest, srv grpc.ServerStreamingServer[v1alpha1.WatchResponse]) error {
	if err := checkLabelQueries(req.GetOptions().GetLabelQuery()); err != nil {
		return err
	}

	return s.State.Watch(req, srv)
}

// Create implements v1alpha1.StateServer: refused.
func (s *stateServer) Create(context.Context, *v1alpha1.CreateRequest) (*v1alpha1.CreateResponse, error) {
	return nil, errReadOnly
}

// Update implements v1alpha1.StateServer: refused.
func (s *stateServer) Update(context.Context, *v1alpha1.UpdateRequest) (*v1alpha1.UpdateResponse, error) {
	return nil, errReadOnly
}

// Destroy implements v1alpha1.StateServer: refused.
func (s *stateServer) Destroy(context.Context, *v1alpha1.DestroyRequest) (*v1alpha1.DestroyResponse, error) {
	return nil, errReadOnly
}

// Teardown implements v1alpha1.StateServer: refused.
func (s *stateServer) Teardown(context.Context, *v1alpha1.TeardownRequest) (*v1alpha1.TeardownResponse, error) {
	return nil, errReadOnly
}

// TeardownAndDestroy implements v1alpha1.StateServer: refused.
func (s *stateServer) TeardownAndDestroy(context.Context, *v1alpha1.TeardownAndDestroyRequest) (*v1alpha1.TeardownAndDestroyResponse, error) {
	return nil, errReadOnly
}

// checkLabelQueries refuses terms whose operator compares with a value but that
// carry none.
func checkLabelQueries(queries []*v1alpha1.LabelQuery) error {
	for _, query := range queries {
		for _, term := range query.GetTerms() {
			switch term.GetOp() {
			case v1alpha1.LabelTerm_EQUAL, v1alpha1.LabelTerm_LT, v1alpha1.LabelTerm_LTE,
				v1alpha1.LabelTerm_LT_NUMERIC, v1alpha1.LabelTerm_LTE_NUMERIC:
				if len(term.GetValue()) == 0 {
					return status.Errorf(codes.InvalidArgument, "label term %q %s has no value", term.GetKey(), term.GetOp())
				}
			case v1alpha1.LabelTerm_EXISTS, v1alpha1.LabelTerm_NOT_EXISTS, v1alpha1.LabelTerm_IN: //nolint:staticcheck // SA1019: NOT_EXISTS is deprecated, but clients may still send it and COSI still takes it.
			default:
				return status.Errorf(codes.InvalidArgument, "unknown label term operator %d", term.GetOp())
			}
		}
	}

	return nil
}
