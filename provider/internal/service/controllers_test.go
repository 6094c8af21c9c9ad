package service

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
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
