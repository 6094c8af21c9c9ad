package service

import (
	"errors"

	"go.uber.org/zap"

	"github.com/anvil-metal/anvil/agent/internal/session"
	"github.com/anvil-metal/anvil/agent/internal/tpm"
)

// openIdentity opens the machine's TPM identity for the session; nil, and the log says
// why, when the machine shows none (the provider then knows it as identity "none"). An
// empty devRoot opens no device, as for the inventory (a run outside the machine).
func openIdentity(devRoot string, logger *zap.Logger) session.Identity {
	if devRoot == "" {
		logger.Info("no TPM identity: no device directory to open the TPM in")

		return nil
	}

	id, err := tpm.Open(devRoot)

	switch {
	case errors.Is(err, tpm.ErrNoTPM):
		logger.Info("no TPM identity: the machine shows no TPM device", zap.Error(err))

		return nil
	case err != nil:
		logger.Warn("no TPM identity: the TPM could not give its EK and an AK", zap.Error(err))

		return nil
	}

	logger.Info("TPM identity", zap.String("device", id.Device()), zap.String("ek", id.Fingerprint()))

	return id
}
