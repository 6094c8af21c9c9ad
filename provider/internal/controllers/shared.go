package controllers

import (
	"context"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
)

// modifyShared is safe.WriterModify for a resource every replica of a site may write (a
// machine's record, its status, its inventory: each replica records what it sees). An
// update that races another replica's is retried by the state; a first create that
// races one is not (the resource exists by the time it is created): it is retried here,
// once, as the update it has become.
func modifyShared[T resource.Resource](ctx context.Context, w controller.Writer, r T, fn func(T) error) error {
	err := safe.WriterModify(ctx, w, r, fn)
	if err != nil && state.IsConflictError(err) && !state.IsOwnerConflictError(err) && !state.IsPhaseConflictError(err) {
		err = safe.WriterModify(ctx, w, r, fn)
	}

	return err
}
