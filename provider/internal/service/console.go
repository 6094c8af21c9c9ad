package service

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"path/filepath"

	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/anvil-metal/anvil/provider/internal/console"
)

// consoleService builds the web console: HTTPS on --ui-listen-address, a certificate
// from the provider's CA (or the user's), a login with the token the provider writes
// on first start, or the admin client certificate.
func (env *environment) consoleService() ([]runner, error) {
	opts := env.opts
	if opts.UIListenAddress == "" {
		return nil, nil
	}

	host, port, err := net.SplitHostPort(opts.UIListenAddress)
	if err != nil {
		return nil, fmt.Errorf("invalid --ui-listen-address: %w", err)
	}

	tlsConfig, err := env.consoleTLS(host)
	if err != nil {
		return nil, err
	}

	var (
		hash    [32]byte
		created bool
	)

	if env.site != nil {
		// Every replica's console opens with the one token.
		hash, created, err = env.site.shareConsoleToken(context.Background(), opts, env.store.Keys())
	} else {
		hash, created, err = console.LoadToken(opts.StateDir)
	}

	if err != nil {
		return nil, err
	}

	// The file, never the token.
	tokenFile := filepath.Join(opts.StateDir, console.TokenFile)
	if created {
		env.logger.Info("console login token written", zap.String("file", tokenFile))
	}

	var omniURL string
	if env.omni != nil {
		omniURL = opts.OmniAPIEndpoint
	}

	srv, err := console.New(console.Options{
		State: env.store, Transitions: env.transitions, Policy: env.policy, Trace: env.trace,
		TokenHash: hash, OmniURL: omniURL, Logger: env.logger.Named("console"),
	})
	if err != nil {
		return nil, err
	}

	env.consoleURL = "https://" + net.JoinHostPort(env.advertise.String(), port) + "/ui/"

	run := func(ctx context.Context) error {
		lis, err := net.Listen("tcp", opts.UIListenAddress)
		if err != nil {
			return fmt.Errorf("error listening on %s: %w", opts.UIListenAddress, err)
		}

		env.logger.Info("console serving", zap.String("url", env.consoleURL), zap.String("token_file", tokenFile))

		eg, ctx := errgroup.WithContext(ctx)

		eg.Go(func() error { return srv.Run(ctx) })
		eg.Go(func() error { return srv.Serve(ctx, tls.NewListener(lis, tlsConfig)) })

		return eg.Wait()
	}

	return []runner{{name: "console", run: run}}, nil
}

// consoleTLS is the console's TLS: the user's certificate, or one the provider's CA
// issues for the addresses it is reached at; a client certificate from the CA (the
// admin's, as anvilctl presents) stands for a login.
func (env *environment) consoleTLS(host string) (*tls.Config, error) {
	var cert tls.Certificate

	switch opts := env.opts; {
	case opts.UITLSCertFile != "" || opts.UITLSKeyFile != "":
		if opts.UITLSCertFile == "" || opts.UITLSKeyFile == "" {
			return nil, fmt.Errorf("--ui-tls-cert-file and --ui-tls-key-file go together")
		}

		c, err := tls.LoadX509KeyPair(opts.UITLSCertFile, opts.UITLSKeyFile)
		if err != nil {
			return nil, fmt.Errorf("error loading the console's certificate: %w", err)
		}

		cert = c
	default:
		hosts := []string{env.advertise.String(), "127.0.0.1", "::1", "localhost"}
		if host != "" {
			hosts = append(hosts, host)
		}

		c, err := env.ca.ServerCertificate(hosts)
		if err != nil {
			return nil, fmt.Errorf("error issuing the console's certificate: %w", err)
		}

		cert = c
	}

	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.VerifyClientCertIfGiven,
		ClientCAs:    env.ca.Pool(),
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"h2", "http/1.1"},
	}, nil
}
