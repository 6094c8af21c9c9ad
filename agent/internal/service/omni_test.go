package service

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/agent/internal/config"
)

// TestLogSecrets: the kernel log to Omni is told every secret the agent knows — those on
// its command line, and its token and Omni's join token also when flags gave them.
func TestLogSecrets(t *testing.T) {
	t.Parallel()

	cmdline := "console=ttyS0 siderolink.api=grpc://10.77.0.3:8090?jointoken=v2%3Ajoin-secret anvil.token=v1.cmdline.sig\n"
	cfg := config.FromCmdline(cmdline).Merge(config.Config{Token: "v1.flag.sig"})

	omni, err := cfg.Omni()
	require.NoError(t, err)

	secrets := logSecrets(cmdline, cfg, omni)
	for _, s := range []string{"v2%3Ajoin-secret", "v2:join-secret", "v1.cmdline.sig", "v1.flag.sig"} {
		assert.Contains(t, secrets, s)
	}
}
