package service

import (
	"context"
	"fmt"
	"net"

	"github.com/siderolabs/image-factory/pkg/schematic"

	"github.com/anvil-metal/anvil/provider/internal/control"
	"github.com/anvil-metal/anvil/provider/internal/pki"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// controlAPI builds the control API: the state API (read-only) and the transitions, on
// the Unix socket and, when configured, over TCP with mutual TLS (clients present the
// admin certificate the provider wrote into its state directory).
func (env *environment) controlAPI() ([]runner, error) {
	opts := control.Options{
		SocketPath:      env.controlSocket(),
		InstallRecorder: env.status,
		// The same schematic the SchematicController registers with the factory.
		SchematicFor: func(_ context.Context, _ string, alloc resources.Allocation) (schematic.Schematic, error) {
			return env.scripts.Schematic(alloc.Extensions, alloc.KernelArgs), nil
		},
		Logger: env.logger.Named("control"),
	}

	if addr := env.opts.ControlListenAddress; addr != "" {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, fmt.Errorf("invalid --control-listen-address: %w", err)
		}

		hosts := []string{env.advertise.String(), "127.0.0.1", "::1", "localhost"}
		if host != "" {
			hosts = append(hosts, host)
		}

		tlsConfig, err := env.ca.MutualTLS(hosts)
		if err != nil {
			return nil, fmt.Errorf("error issuing the control API certificate: %w", err)
		}

		opts.TCPAddress, opts.TLSConfig = addr, tlsConfig
	}

	env.control = control.New(env.store, opts)

	return []runner{{name: "control", run: env.control.Run}}, nil
}

// loadAuthority loads (or creates) the provider's CA in its state directory.
func loadAuthority(dir string) (*pki.Authority, error) {
	ca, err := pki.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("error loading the provider CA: %w", err)
	}

	return ca, nil
}
