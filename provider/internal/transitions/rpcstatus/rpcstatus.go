// Package rpcstatus is the gRPC form of the transitions' errors, for the APIs that
// carry them: the control API (anvilctl) and the Omni adapter's.
package rpcstatus

import (
	"context"
	"errors"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/anvil-metal/anvil/provider/internal/transitions"
)

// Domain and reasons of the google.rpc.ErrorInfo details, for clients that must tell one
// refusal from another without reading its message.
const (
	Domain = "anvil.dev"
	// ReasonManaged: another owner decides the transition; metadata "manager" names it.
	ReasonManaged = "MANAGED"
)

// withInfo adds the ErrorInfo detail of the refusals that have one.
func withInfo(st *status.Status, refusal *transitions.Error) *status.Status {
	if refusal.Code != transitions.CodeManaged {
		return st
	}

	detailed, err := st.WithDetails(&errdetails.ErrorInfo{
		Domain: Domain, Reason: ReasonManaged, Metadata: map[string]string{"manager": refusal.Manager},
	})
	if err != nil { // only when the detail cannot be marshaled: the status still says it
		return st
	}

	return detailed
}

// Managed says whether err is a transition refused because another owner decides it, and
// names that owner: what a client of the control API reads from the status details.
func Managed(err error) (manager string, ok bool) {
	for _, d := range status.Convert(err).Details() {
		if info, isInfo := d.(*errdetails.ErrorInfo); isInfo && info.GetDomain() == Domain && info.GetReason() == ReasonManaged {
			return info.GetMetadata()["manager"], true
		}
	}

	return "", false
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
