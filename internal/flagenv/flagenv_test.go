package flagenv_test

import (
	"testing"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/internal/flagenv"
)

func TestApply(t *testing.T) {
	t.Setenv("ANVIL_API_PORT", "6000")
	t.Setenv("ANVIL_DEBUG", "true")
	t.Setenv("ANVIL_STATE_DIR", "/from/env")
	t.Setenv("OMNI_ENDPOINT", "https://omni.example")

	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	port := fs.Int("api-port", 50042, "")
	debug := fs.Bool("debug", false, "")
	dir := fs.String("state-dir", "/var/lib/anvil", "")
	omni := fs.String("omni-api-endpoint", "", "")
	labels := fs.StringSlice("machine-labels", nil, "")

	require.NoError(t, fs.Parse([]string{"--state-dir", "/from/flag"}))
	require.NoError(t, flagenv.Apply(fs, map[string][]string{"omni-api-endpoint": {"OMNI_ENDPOINT"}}))

	assert.Equal(t, 6000, *port)
	assert.True(t, *debug)
	assert.Equal(t, "/from/flag", *dir, "a flag given on the command line wins")
	assert.Equal(t, "https://omni.example", *omni)
	assert.Empty(t, *labels)
	assert.Equal(t, "ANVIL_MACHINE_LABELS", flagenv.Name("machine-labels"))
}

func TestApplyInvalid(t *testing.T) {
	t.Setenv("ANVIL_API_PORT", "not-a-number")

	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	fs.Int("api-port", 50042, "")

	require.NoError(t, fs.Parse(nil))
	assert.ErrorContains(t, flagenv.Apply(fs, nil), "invalid value of ANVIL_API_PORT")
}
