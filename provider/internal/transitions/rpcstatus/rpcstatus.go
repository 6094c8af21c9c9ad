// Package rpcstatus is the gRPC form of the transitions' errors, for the APIs that
// carry them: the control API (anvilctl) and the Omni adapter's.
package rpcstatus

import (
	"context"
	"errors"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	controlv1 "github.com/anvil-metal/anvil/api/control/v1"
	"github.com/anvil-metal/anvil/provider/internal/transitions"
)

// withInfo adds the ErrorInfo detail of the refusals that have one (controlv1's
// ErrorInfo reads it).
func withInfo(st *status.Status, refusal *transitions.Error) *status.Status {
	var info *errdetails.ErrorInfo

	switch {
	case refusal.Code == transitions.CodeManaged:
		info = &errdetails.ErrorInfo{Domain: controlv1.ErrorDomain, Reason: controlv1.ReasonManaged, Metadata: map[string]string{"manager": refusal.Manager}}
	case refusal.Holding != "":
		info = &errdetails.ErrorInfo{Domain: controlv1.ErrorDomain, Reason: controlv1.ReasonOwnerHolds, Metadata: map[string]string{"machine": refusal.Holding}}
	default:
		return st
	}

	detailed, err := st.WithDetails(info)
	if err != nil { // only when the detail cannot be marshaled: the status still says it
		return st
	}

	return detailed
}

// codeOf maps the transitions' refusals onto gRPC codes.
var codeOf = map[transitions.Code]codes.Code{
	transitions.CodeInvalid:     codes.InvalidArgument,
	transitions.CodeNotFound:    codes.NotFound,
	transitions.CodeRefused:     codes.FailedPrecondition,
	transitions.CodeManaged:     codes.FailedPrecondition,
	transitions.CodeUnavailable: codes.Unimplemented,
}

// Of is the gRPC status of a transition's error: a refusal keeps its message, a
// cancelled or expired context its code, any other failure is Internal.
func Of(err error) error {
	var refusal *transitions.Error
	if errors.As(err, &refusal) {
		if code, ok := codeOf[refusal.Code]; ok {
			return withInfo(status.New(code, refusal.Msg), refusal).Err()
		}
	}

	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return status.FromContextError(err).Err()
	}

	return status.Error(codes.Internal, err.Error())
}
