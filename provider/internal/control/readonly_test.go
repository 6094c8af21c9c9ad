package control_test

import (
	"context"
	"testing"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/anvil-metal/anvil/provider/internal/control"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

func TestReadOnlyRefusesWrites(t *testing.T) {
	t.Parallel()

	ctx := t.Context()
	st := openState(t)
	ro := control.ReadOnly(st)
	ptr := resources.NewMachine(machineID).Metadata()
	noop := func(resource.Resource) error { return nil }

	for name, write := range map[string]func(context.Context) error{
		"create":  func(ctx context.Context) error { return ro.Create(ctx, resources.NewMachineIntent(machineID)) },
		"update":  func(ctx context.Context) error { return ro.Update(ctx, resources.NewMachine(machineID)) },
		"destroy": func(ctx context.Context) error { return ro.Destroy(ctx, ptr) },
		"teardown": func(ctx context.Context) error {
			_, err := ro.Teardown(ctx, ptr)

			return err
		},
		"teardown and destroy": func(ctx context.Context) error { return ro.TeardownAndDestroy(ctx, ptr) },
		"add finalizer":        func(ctx context.Context) error { return ro.AddFinalizer(ctx, ptr, "x") },
		"remove finalizer":     func(ctx context.Context) error { return ro.RemoveFinalizer(ctx, ptr, "x") },
		"modify":               func(ctx context.Context) error { return ro.Modify(ctx, resources.NewMachine(machineID), noop) },
		"update with conflicts": func(ctx context.Context) error {
			_, err := ro.UpdateWithConflicts(ctx, ptr, func(resource.Resource) error { return nil })

			return err
		},
	} {
		err := write(ctx)
		require.ErrorIs(t, err, control.ErrReadOnly, name)
		assert.Equal(t, codes.PermissionDenied, status.Code(err), name)
		assert.Contains(t, err.Error(), "writes go through the transition service")
	}

	// Reads pass through.
	got, err := ro.Get(ctx, ptr)
	require.NoError(t, err)
	assert.Equal(t, machineID, got.Metadata().ID())

	list, err := ro.List(ctx, ptr)
	require.NoError(t, err)
	assert.Len(t, list.Items, 1)

	ch := make(chan state.Event, 1)
	require.NoError(t, ro.WatchKind(ctx, ptr, ch, state.WithBootstrapContents(true)))
	assert.Equal(t, state.Created, (<-ch).Type)
}

// A BMC's password is never served, by any read.
func TestReadOnlyHidesSecrets(t *testing.T) {
	t.Parallel()

	ctx := t.Context()
	st := openState(t)

	secret := resources.NewBMCSecret(machineID)
	secret.TypedSpec().Password = "hunter2-bmc"
	require.NoError(t, st.Create(ctx, secret))

	ro := control.ReadOnly(st)
	ptr := secret.Metadata()
	ch, chs := make(chan state.Event, 1), make(chan []state.Event, 1)

	for name, read := range map[string]func() error{
		"get": func() error {
			_, err := ro.Get(ctx, ptr)

			return err
		},
		"list": func() error {
			_, err := ro.List(ctx, ptr)

			return err
		},
		"watch":                 func() error { return ro.Watch(ctx, ptr, ch) },
		"watch kind":            func() error { return ro.WatchKind(ctx, ptr, ch) },
		"watch kind aggregated": func() error { return ro.WatchKindAggregated(ctx, ptr, chs) },
	} {
		err := read()
		require.Error(t, err, name)
		assert.Equal(t, codes.PermissionDenied, status.Code(err), name)
		assert.NotContains(t, err.Error(), "hunter2", name)
	}
}
