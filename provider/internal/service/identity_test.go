package service

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCheckIdentityFlags(t *testing.T) {
	t.Parallel()

	require.NoError(t, checkIdentityFlags(Options{RequireTPM: true}))
	require.NoError(t, checkIdentityFlags(Options{AutoAccept: "all", AutoAcceptWithoutTPM: true}))
	assert.ErrorContains(t, checkIdentityFlags(Options{RequireTPM: true, AutoAcceptWithoutTPM: true}), "--require-tpm")
}
