package service

import (
	"context"
	"net"

	"github.com/cosi-project/runtime/pkg/state"
	"go.uber.org/zap"

	"github.com/anvil-metal/anvil/agent/internal/config"
	"github.com/anvil-metal/anvil/agent/internal/inventory"
	"github.com/anvil-metal/anvil/agent/internal/kmsglog"
	"github.com/anvil-metal/anvil/internal/bootparams"
	"github.com/anvil-metal/anvil/internal/maintenance"
	"github.com/anvil-metal/anvil/internal/siderolink"
	"github.com/anvil-metal/anvil/internal/talosversion"
)

// omniAgent is the agent's side of Omni (DESIGN.md, "Agent ⇄ Omni"): it joins SideroLink
// as Talos does, serves the Talos maintenance API on the SideroLink address only, and
// ships the kernel log to Omni. The provider session is unchanged beside it.
type omniAgent struct {
	cfg       config.Omni
	machineID string
	st        state.State
	procRoot  string
	pid1      bool
	logger    *zap.Logger
	// secrets are what the kernel log shipped to Omni must not show (logSecrets).
	secrets []string
}

// logSecrets are the secret values the agent knows, which no line of its kernel log may
// show: those on its command line (bootparams.Secrets), its token and Omni's join token
// however they were given.
func logSecrets(cmdline string, cfg config.Config, omni config.Omni) []string {
	secrets := append(bootparams.Secrets(cmdline), cfg.Token)
	if omni.API != nil {
		secrets = append(secrets, omni.API.JoinToken)
	}

	return secrets
}

// run runs until ctx is done. Without Omni's join args there is nothing to do.
func (o *omniAgent) run(ctx context.Context) {
	// The kernel log's connection to Omni is the agent's one standing connection to Omni
	// over SideroLink: its receiver dropping it means Omni's end went away — Omni
	// restarted, which WireGuard alone hides: a restarted Omni takes the old peer back,
	// and the handshakes resume. Then SideroLink provisions again at once.
	reprovision := make(chan struct{}, 1)

	if o.cfg.KernelLog != nil && o.pid1 {
		// Started first: it holds the records from the start of the boot until the
		// tunnel carries them.
		go func() {
			err := kmsglog.Run(ctx, kmsglog.Options{
				URL: o.cfg.KernelLog, Logger: o.logger.Named("kmsglog"), Secrets: o.secrets,
				OnLost: func(error) {
					select {
					case reprovision <- struct{}{}:
					default:
					}
				},
			})
			if err != nil {
				o.logger.Warn("not shipping the kernel log to Omni", zap.Error(err))
			}
		}()
	}

	if o.cfg.API == nil {
		return
	}

	srv, err := maintenance.New(ctx, o.st, maintenance.Options{AgentVersion: Version, ProcRoot: o.procRoot, Logger: o.logger.Named("maintenance")})
	if err != nil {
		o.logger.Error("no maintenance API: Omni will not see this machine's hardware", zap.Error(err))

		return
	}

	addresses, onAddress := maintenance.Addresses()

	go srv.Follow(ctx, addresses)

	err = siderolink.Run(ctx, siderolink.Options{
		API: o.cfg.API.Host, Insecure: o.cfg.API.Insecure, JoinToken: o.cfg.API.JoinToken,
		UUID: o.machineID, MACs: o.macs(ctx), TalosVersion: talosversion.Tag,
		OnAddress:   onAddress,
		Reprovision: reprovision,
		Logger:      o.logger.Named("siderolink"),
	})
	if err != nil {
		o.logger.Error("not joining Omni", zap.Error(err))
	}
}

// macs gives the physical NICs' addresses for the node unique token's fingerprint.
func (o *omniAgent) macs(ctx context.Context) func() []net.HardwareAddr {
	return func() []net.HardwareAddr {
		inv, err := inventory.Snapshot(ctx, o.st)
		if err != nil {
			o.logger.Warn("no inventory for the node unique token's fingerprint", zap.Error(err))

			return nil
		}

		return siderolink.LinkMACs(inv.Links)
	}
}
