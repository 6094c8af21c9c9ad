package fleetsim

import (
	"net/http"
	"strings"

	"github.com/anvil-metal/anvil/agent/internal/config"
)

// Decisions of a boot script, as the machine acts on them.
const (
	decisionAgent = "agent"
	decisionTalos = "talos"
	decisionDisk  = "disk"
	decisionRetry = "retry"
)

// readScript says what a boot script boots; for the agent, the configuration its kernel
// line gives it (what the agent reads from /proc/cmdline); for Talos, its kernel's URL
// (the Image Factory's without the provider's cache).
func readScript(status int, body string) (string, config.Config, string) {
	if status == http.StatusNotFound {
		return decisionDisk, config.Config{}, ""
	}

	if status != http.StatusOK || !strings.HasPrefix(body, "#!ipxe") {
		return decisionRetry, config.Config{}, ""
	}

	for line := range strings.SplitSeq(body, "\n") {
		line = strings.TrimSpace(line)

		switch {
		case strings.HasPrefix(line, "kernel ") && strings.Contains(line, "anvil.token="):
			cfg := config.FromCmdline(strings.TrimPrefix(line, "kernel "))
			if cfg.Validate() != nil {
				return decisionRetry, config.Config{}, ""
			}

			return decisionAgent, cfg, ""
		case strings.HasPrefix(line, "kernel ") && strings.Contains(line, " talos.config="):
			return decisionTalos, config.Config{}, strings.Fields(line)[1]
		case strings.HasPrefix(line, "sanboot"), line == "exit", strings.HasPrefix(line, "exit "):
			return decisionDisk, config.Config{}, ""
		}
	}

	return decisionRetry, config.Config{}, ""
}
