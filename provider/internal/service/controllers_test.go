package service

import (
	"testing"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/stretchr/testify/assert"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/anvil-metal/anvil/provider/internal/controllers"
)

func TestQuietReconciles(t *testing.T) {
	t.Parallel()

	core, logs := observer.New(zapcore.InfoLevel)
	logger := zap.New(quietReconciles{core}).With(zap.String("controller", "PowerController"))

	logger.Info("reconcile succeeded")
	logger.Info("power action")
	logger.Error("reconcile failed")

	var messages []string
	for _, e := range logs.All() {
		messages = append(messages, e.Message)
	}

	assert.Equal(t, []string{"power action", "reconcile failed"}, messages)
}

func TestMaxPendingMachinesChecked(t *testing.T) {
	t.Parallel()

	for _, n := range []int{0, -1} {
		env := &environment{opts: Options{MaxPendingMachines: n}}

		_, _, err := env.controllers(nil, nil, false, resource.LabelQuery{})
		assert.ErrorContains(t, err, "--max-pending-machines must be at least 1")
	}

	assert.Equal(t, controllers.DefaultMaxPendingMachines, DefaultOptions.MaxPendingMachines)
}
