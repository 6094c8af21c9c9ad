package rpcstatus_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	controlv1 "github.com/anvil-metal/anvil/api/control/v1"
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

// TestErrorInfo: a refusal because another owner decides carries that owner in its
// details, and one because the claim's owner holds another machine names that machine,
// through the gRPC status as a client receives it; no other refusal has details.
func TestErrorInfo(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		err    error
		reason string
		meta   map[string]string
	}{
		{&transitions.Error{Code: transitions.CodeManaged, Msg: "allocate: managed by omni", Manager: "omni"}, controlv1.ReasonManaged, map[string]string{"manager": "omni"}},
		{&transitions.Error{Code: transitions.CodeRefused, Msg: "capi/a/b holds machine \"m1\"", Holding: "m1"}, controlv1.ReasonOwnerHolds, map[string]string{"machine": "m1"}},
		{&transitions.Error{Code: transitions.CodeRefused, Msg: "machine \"x\" is already allocated"}, "", nil},
		{errors.New("disk full"), "", nil},
		{nil, "", nil},
	} {
		var err error
		if tc.err != nil {
			err = rpcstatus.Of(tc.err)
		}

		// Through the wire form, as a client receives it.
		if st, ok := status.FromError(err); ok && err != nil {
			err = status.ErrorProto(st.Proto())
		}

		for _, reason := range []string{controlv1.ReasonManaged, controlv1.ReasonOwnerHolds} {
			meta, ok := controlv1.ErrorInfo(err, reason)
			assert.Equal(t, reason == tc.reason, ok, "%v: %s", tc.err, reason)

			if reason == tc.reason {
				assert.Equal(t, tc.meta, meta, "%v", tc.err)
			}
		}
	}
}
