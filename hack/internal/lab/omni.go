package lab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/anvil-metal/anvil/hack/internal/labnet"
	"github.com/anvil-metal/anvil/hack/internal/omnilab"
)

// OmniDir is the directory of the lab Omni of the lab in dir: its state and secrets,
// removed by Down.
func OmniDir(dir string) string { return filepath.Join(dir, "omni") }

// OmniLog is the lab Omni's output; it stays after Down, like the other logs.
func (s *State) OmniLog() string { return filepath.Join(s.Dir, "omni.log") }

// startOmni joins Omni's namespace to the lab network and starts Omni there, with the
// factory stand-in's versions (it need not run yet: Omni asks again until it answers).
func (s *State) startOmni(ctx context.Context, cfg Config) error {
	s.OmniNS = labnet.OmniNamespace(s.Prefix)

	// Saved first: Down then removes the namespace even if what follows fails.
	if err := s.save(); err != nil {
		return err
	}

	if err := s.Net().UpOmni(); err != nil {
		return err
	}

	_ = os.Remove(s.OmniLog()) // this run's log only, as the factory's

	return s.runOmni(ctx, cfg)
}

// RestartOmni stops the lab's Omni and starts it again on its state, as an Omni restarts
// in production: its machines, links and keys kept. Its log goes on.
func (s *State) RestartOmni(ctx context.Context, cfg Config) error {
	if s.Omni == nil {
		return fmt.Errorf("the lab in %s runs no Omni", s.Dir)
	}

	if err := s.Omni.Halt(ctx); err != nil {
		return err
	}

	return s.runOmni(ctx, cfg)
}

// runOmni starts Omni on its directory and records it.
func (s *State) runOmni(ctx context.Context, cfg Config) error {
	o, err := omnilab.Start(ctx, omnilab.Config{
		Bin:        cfg.OmniBin,
		Dir:        OmniDir(s.Dir),
		Log:        s.OmniLog(),
		NetNS:      s.OmniNS,
		FactoryURL: "http://" + FactoryListen,
		Registry:   FactoryListen,
	})
	if o != nil {
		s.Omni = o

		if err := s.save(); err != nil {
			return err
		}
	}

	if err != nil {
		return fmt.Errorf("error starting Omni: %w", err)
	}

	return nil
}

// ProviderID is the infra provider the lab's provider is in its Omni.
const ProviderID = "anvil-lab"

// OmniProviderKeyFile holds the lab provider's Omni service account key (mode 0600).
func (s *State) OmniProviderKeyFile() string { return filepath.Join(OmniDir(s.Dir), "provider.key") }

// omniProviderArgs creates the infra provider in the lab's Omni, once (its key is kept),
// and returns the flags that make the provider Omni's infra provider, verifying Omni's
// certificate with the lab's CA.
func (s *State) omniProviderArgs(ctx context.Context, cfg Config) ([]string, error) {
	if _, err := os.Stat(s.OmniProviderKeyFile()); err != nil {
		if cfg.OmnictlBin == "" {
			return nil, fmt.Errorf("the lab's Omni needs omnictl (Config.OmnictlBin) to create the infra provider")
		}

		c, err := s.OmniClient(cfg.OmnictlBin)
		if err != nil {
			return nil, err
		}

		key, err := c.CreateInfraProvider(ctx, ProviderID)
		if err != nil {
			return nil, fmt.Errorf("error creating the infra provider %s in Omni: %w", ProviderID, err)
		}

		if err := os.WriteFile(s.OmniProviderKeyFile(), []byte(key+"\n"), 0o600); err != nil {
			return nil, fmt.Errorf("error writing the provider's Omni key: %w", err)
		}
	}

	return []string{
		"--omni-api-endpoint", s.Omni.Endpoint(),
		"--omni-service-account-key-file", s.OmniProviderKeyFile(),
		"--omni-ca-cert", s.Omni.CAFile(),
		"--id", ProviderID,
	}, nil
}

// OmniClient runs omnictl (bin) against the lab's Omni as its administrator, from Omni's
// namespace.
func (s *State) OmniClient(bin string) (*omnilab.Client, error) {
	if s.Omni == nil {
		return nil, fmt.Errorf("the lab in %s runs no Omni (lab up --omni)", s.Dir)
	}

	return s.Omni.Client(bin, s.OmniNS), nil
}

func writeOmniStatus(b *strings.Builder, s *State, state string) {
	o := s.Omni

	fmt.Fprintf(b, "omni      pid %-8d %s  log %s  %s (machines: %s, WireGuard udp %s:%d)\n",
		o.PID, state, s.OmniLog(), o.Endpoint(), o.MachineAPIURL(), omnilab.Addr, omnilab.WireGuardPort)
	fmt.Fprintf(b, "  namespace %s, CA %s, admin key %s\n", s.OmniNS, o.CAFile(), o.AdminKeyFile())
	fmt.Fprintf(b, "  omnictl: go run ./hack/cmd/lab --dir %s omnictl -- get machines   (see hack/README.md)\n", s.Dir)
}
