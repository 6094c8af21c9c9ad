package service

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	factoryclient "github.com/siderolabs/image-factory/pkg/client"
	"go.uber.org/zap"

	"github.com/anvil-metal/anvil/provider/internal/boot"
	"github.com/anvil-metal/anvil/provider/internal/controllers"
)

// agentTalosRetryMax bounds the wait between two tries at making the agent's Talos ready.
const agentTalosRetryMax = time.Minute

// parseAgentTalos reads --agent-talos-version, --agent-talos-extensions and
// --agent-talos-extension-name: the agent's Talos, nil when the agent boots from
// --agent-assets-dir. Agent mode is the metal platform's (Talos reads the metal-agent
// flag file there only), so another --talos-platform is refused.
func parseAgentTalos(opts Options, talosKernelArgs []string) (*boot.AgentTalos, error) {
	var extra []string

	for _, ext := range opts.AgentTalosExtensions {
		if ext = strings.TrimSpace(ext); ext != "" {
			extra = append(extra, ext)
		}
	}

	if opts.AgentTalosVersion == "" {
		if len(extra) > 0 {
			return nil, errors.New("--agent-talos-extensions are extensions of the agent's Talos: they need --agent-talos-version")
		}

		return nil, nil //nolint:nilnil // no agent Talos: the agent boots from its own assets
	}

	if opts.TalosPlatform != "metal" {
		return nil, fmt.Errorf("--agent-talos-version needs --talos-platform metal, not %q: Talos' agent mode is the metal platform's", opts.TalosPlatform)
	}

	return boot.NewAgentTalos(opts.AgentTalosVersion, opts.AgentTalosExtensionName, extra, talosKernelArgs)
}

// agentTalosServices makes the agent's Talos ready, once, at start (none when the agent
// boots from its own assets): its schematic registered with the Image Factory and, with
// the image cache, its kernel, initramfs and cmdline for amd64 fetched into it, so that
// the first machines to boot the agent wait for no download. It tries again, waiting
// longer each time, until it can: until then an agent boot waits too, asking again.
func (env *environment) agentTalosServices(factory *factoryclient.Client) []runner {
	at := env.scripts.AgentTalos
	if at == nil {
		return nil
	}

	at.Register = func(ctx context.Context) error {
		if err := controllers.RegisterSchematic(ctx, factory, at.SchematicID, at.Schematic); err != nil {
			return fmt.Errorf("error registering the agent's schematic %s with the Image Factory: %w", at.SchematicID, err)
		}

		return nil
	}

	logger := env.logger.Named("agent-talos")

	logger.Info("agents boot as Talos in agent mode, with Anvil's metal-agent extension; they cannot kexec, so allocations go through the firmware",
		zap.String("talos_version", at.Version), zap.String("schematic", at.SchematicID),
		zap.Strings("extensions", at.Schematic.Customization.SystemExtensions.OfficialExtensions))

	return []runner{{name: "agent talos", run: func(ctx context.Context) error {
		for wait := time.Second; ; wait = min(2*wait, agentTalosRetryMax) {
			err := at.Register(ctx)
			if err == nil && env.scripts.Cache != nil {
				_, err = env.scripts.AgentTalosBoot(ctx, "amd64")
			}

			if err == nil {
				logger.Info("the agent's Talos is ready", zap.Bool("cached", env.scripts.Cache != nil))

				return nil
			}

			if ctx.Err() != nil {
				return nil //nolint:nilerr // stopping: the provider's end, not this runner's failure
			}

			logger.Warn("the agent's Talos is not ready: trying again", zap.Duration("in", wait), zap.Error(err))

			select {
			case <-ctx.Done():
				return nil
			case <-time.After(wait):
			}
		}
	}}}
}
