package tpm_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/agent/internal/tpm"
)

// TestOpenNoDevice: a machine without a TPM device has no identity, and says why.
func TestOpenNoDevice(t *testing.T) {
	t.Parallel()

	_, err := tpm.Open(t.TempDir())
	assert.ErrorIs(t, err, tpm.ErrNoTPM)
}

// TestOpenNotADevice: a file where the device should be is an error of its own, not
// "no TPM", and the resource manager's path is tried first.
func TestOpenNotADevice(t *testing.T) {
	t.Parallel()

	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tpmrm0"), nil, 0o600))

	_, err := tpm.Open(dir)
	require.Error(t, err)
	assert.NotErrorIs(t, err, tpm.ErrNoTPM)
	assert.Contains(t, err.Error(), filepath.Join(dir, "tpmrm0"))
}
