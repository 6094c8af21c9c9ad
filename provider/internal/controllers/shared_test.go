package controllers

import (
	"context"
	"errors"
	"testing"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/state/impl/inmem"
	"github.com/stretchr/testify/assert"

	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// racingWriter fails its first Modify calls as the state does when another replica
// created the resource first.
type racingWriter struct {
	controller.Writer

	fail  []error
	calls int
}

func (w *racingWriter) Modify(_ context.Context, r resource.Resource, fn func(resource.Resource) error, _ ...controller.ModifyOption) error {
	w.calls++

	if len(w.fail) > 0 {
		err := w.fail[0]
		w.fail = w.fail[1:]

		return err
	}

	return fn(r)
}

func TestModifyShared(t *testing.T) {
	t.Parallel()

	m := resources.NewMachine("m1")
	exists := inmem.ErrAlreadyExists(m.Metadata())
	other := errors.New("etcd unavailable")

	for _, tc := range []struct {
		name  string
		fail  []error
		calls int
		err   error
	}{
		{"no race", nil, 1, nil},
		{"created by another replica first: retried as an update", []error{exists}, 2, nil},
		{"raced twice: the second error is returned", []error{exists, exists}, 2, exists},
		{"another error: not retried", []error{other}, 1, other},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			w := &racingWriter{fail: tc.fail}
			applied := 0

			err := modifyShared(t.Context(), w, resources.NewMachine("m1"), func(*resources.Machine) error {
				applied++

				return nil
			})

			assert.Equal(t, tc.calls, w.calls)

			if tc.err == nil {
				assert.NoError(t, err)
				assert.Equal(t, 1, applied)
			} else {
				assert.ErrorIs(t, err, tc.err)
			}
		})
	}
}
