package rpcstatus_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/anvil-metal/anvil/provider/internal/transitions"
	"github.com/anvil-metal/anvil/provider/internal/transitions/rpcstatus"
)

// TestOf: every refusal keeps its message under its gRPC code; anything else is
// the provider's own failure.
func TestOf(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		err  error
		code codes.Code
		msg  string
	}{
		{&transitions.Error{Code: transitions.CodeInvalid, Msg: "bad label"}, codes.InvalidArgument, "bad label"},
		{&transitions.Error{Code: transitions.CodeNotFound, Msg: "machine \"x\" is not known"}, codes.NotFound, "machine \"x\" is not known"},
		{fmt.Errorf("wrapped: %w", &transitions.Error{Code: transitions.CodeRefused, Msg: "allocated"}), codes.FailedPrecondition, "allocated"},
		{&transitions.Error{Code: transitions.CodeManaged, Msg: "managed by Omni"}, codes.FailedPrecondition, "managed by Omni"},
		{&transitions.Error{Code: transitions.CodeUnavailable, Msg: "no"}, codes.Unimplemented, "no"},
		{errors.New("disk full"), codes.Internal, "disk full"},
		{fmt.Errorf("writing: %w", context.Canceled), codes.Canceled, ""},
	} {
		st := status.Convert(rpcstatus.Of(tc.err))
		assert.Equal(t, tc.code, st.Code(), "%v", tc.err)

		if tc.msg != "" {
			assert.Equal(t, tc.msg, st.Message())
		}
	}
}

// TestManaged: a refusal because another owner decides carries that owner in its
// details, through the gRPC status; no other refusal does.
func TestManaged(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		err     error
		manager string
		managed bool
	}{
		{&transitions.Error{Code: transitions.CodeManaged, Msg: "allocate: managed by omni", Manager: "omni"}, "omni", true},
		{&transitions.Error{Code: transitions.CodeRefused, Msg: "machine \"x\" is already allocated"}, "", false},
		{errors.New("disk full"), "", false},
		{nil, "", false},
	} {
		var err error
		if tc.err != nil {
			err = rpcstatus.Of(tc.err)
		}

		// Through the wire form, as a client receives it.
		if st, ok := status.FromError(err); ok && err != nil {
			err = status.ErrorProto(st.Proto())
		}

		manager, ok := rpcstatus.Managed(err)
		assert.Equal(t, tc.managed, ok, "%v", tc.err)
		assert.Equal(t, tc.manager, manager, "%v", tc.err)
	}
}
