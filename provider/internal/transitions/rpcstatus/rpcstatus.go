// Package rpcstatus is the gRPC form of the transitions' errors, for the APIs that
// carry them: the control API (anvilctl) and the Omni adapter's.
package rpcstatus

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/anvil-metal/anvil/provider/internal/transitions"
)

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
			return status.Error(code, refusal.Msg)
		}
	}

	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return status.FromContextError(err).Err()
	}

	return status.Error(codes.Internal, err.Error())
}
