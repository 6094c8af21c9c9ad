package service

import (
	"fmt"
	"net"

	"github.com/anvil-metal/anvil/provider/internal/control"
	"github.com/anvil-metal/anvil/provider/internal/pki"
)

// controlAPI builds the control API: the state API (read-only) and the transitions, on
// the Unix socket and, when configured, over TCP with mutual TLS (clients present the
// admin certificate the provider wrote into its state directory).
func (env *environment) controlAPI() ([]runner, error) {
	opts := control.Options{
		SocketPath:  env.controlSocket(),
		StateBackup: env.store,
		Logger:      env.logger.Named("control"),
	}

	// An interface: a nil cache must stay a nil interface (--image-cache-size 0).
	if env.imageCache != nil {
		opts.ImageCache = env.imageCache
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

	srv := control.New(env.store, env.transitions, opts)

	return []runner{{name: "control", run: srv.Run}}, nil
}

// loadAuthority loads (or creates) the provider's CA in its state directory.
func loadAuthority(dir string) (*pki.Authority, error) {
	ca, err := pki.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("error loading the provider CA: %w", err)
	}

	return ca, nil
}
