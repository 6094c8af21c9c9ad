package service

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strconv"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/anvil-metal/anvil/provider/internal/agentapi"
	"github.com/anvil-metal/anvil/provider/internal/controllers"
	"github.com/anvil-metal/anvil/provider/internal/httpapi"
	"github.com/anvil-metal/anvil/provider/internal/inventory"
	"github.com/anvil-metal/anvil/provider/internal/portmux"
	"github.com/anvil-metal/anvil/provider/internal/resources"
	"github.com/anvil-metal/anvil/provider/internal/transitions"
)

// apiServices builds what machines reach on the API port: plaintext HTTP (iPXE scripts,
// assets, metadata, Talos' event sink, health, metrics), the same over HTTPS (where a
// Talos that trusts the provider's CA fetches its configuration) and, over TLS on the same
// port to a client that speaks HTTP/2 alone, the agent API.
func (env *environment) apiServices() ([]runner, error) {
	opts := env.opts
	address := net.JoinHostPort(opts.APIListenAddress, strconv.Itoa(opts.APIPort))

	httpOpts := httpapi.Options{
		State:        env.store,
		View:         env.view,
		Scripts:      env.scripts,
		Observations: env.observations,
		Installs:     env.status,
		Tamper:       env.tamper,
		Policy:       env.policy,
		ImageCache:   env.imageCache,
		Trace:        env.trace,
		BootFiles:    env.httpBootFiles(),
		ConsoleURL:   env.consoleURL,
		Registry:     env.registry,
		Logger:       env.logger.Named("http"),
	}

	if env.omni != nil {
		httpOpts.JoinConfig = env.omni.JoinConfig
	}

	http := httpapi.New(httpOpts)

	hosts := []string{env.advertise.String()}
	if opts.APIListenAddress != "" {
		hosts = append(hosts, opts.APIListenAddress)
	}

	tlsConfig, err := env.ca.ServerTLS(hosts)
	if err != nil {
		return nil, fmt.Errorf("error issuing the API certificate: %w", err)
	}

	// HTTP/1.1 alone: the HTTPS side is for Talos' configuration fetch and an admin's
	// curl, and gRPC's clients (HTTP/2 alone) never reach it.
	httpsConfig := tlsConfig.Clone()
	httpsConfig.NextProtos = []string{"http/1.1"}

	agentOpts := agentapi.Options{
		View:         env.view,
		Tokens:       env.scripts.Tokens,
		Policy:       env.policy,
		BMCPassword:  env.bmcPassword,
		Recorder:     env.agentRecorder(),
		EKs:          env.machines,
		Observations: env.observations,
		Trace:        env.trace,
		Tamper:       env.tamper,
		Registry:     env.registry,
		Logger:       env.logger.Named("agents"),
	}

	// Kexec targets come from the boot-asset cache; without one there is no kexec.
	if env.imageCache != nil {
		agentOpts.Kexec = env.scripts
	}

	agents := agentapi.New(agentOpts)

	run := func(ctx context.Context) error {
		lis, err := net.Listen("tcp", address)
		if err != nil {
			return fmt.Errorf("error listening on %s: %w", address, err)
		}

		mux := portmux.New(lis)
		agentServer := agents.GRPCServer(grpc.Creds(credentials.NewTLS(tlsConfig)))

		eg, ctx := errgroup.WithContext(ctx)

		eg.Go(func() error { return mux.Run(ctx) })
		eg.Go(func() error { return http.Serve(ctx, mux.Plain()) })
		eg.Go(func() error { return http.Serve(ctx, tls.NewListener(mux.HTTPS(), httpsConfig)) })
		eg.Go(func() error {
			// Stopping closes the listener under Serve: that is no error.
			if err := agentServer.Serve(agents.Listener(mux.TLS())); err != nil && ctx.Err() == nil {
				return fmt.Errorf("error serving the agent API: %w", err)
			}

			return nil
		})
		eg.Go(func() error {
			<-ctx.Done()
			agentServer.Stop()

			return nil
		})

		return eg.Wait()
	}

	return []runner{{name: "api", run: run}}, nil
}

// agentRecorder stores what agents report, through the controllers that own it (and
// BMC credentials through the rules that guard user-given ones).
type agentRecorder struct {
	status    *controllers.MachineStatusController
	inventory *controllers.MachineInventoryController
	// transitions guard a user's BMC credentials from an agent's.
	transitions *transitions.Service
	// omni holds Omni's view of the machines in Omni mode, nil standalone.
	omni state.State
	// password is the one the provider had the agent set (agents do not echo it).
	password func(machineID string) string
	logger   *zap.Logger
}

// agentRecorder is where the agents' reports go; in Omni mode wipes also record what
// Omni had of the machine.
func (env *environment) agentRecorder() agentRecorder {
	r := agentRecorder{status: env.status, inventory: env.inventory, transitions: env.transitions, password: env.bmcPassword, logger: env.logger.Named("agents")}

	if env.omni != nil {
		r.omni = env.store
	}

	return r
}

func (r agentRecorder) RecordBMC(ctx context.Context, machineID string, report agentapi.BMCReport) error {
	if report.Failure == "" {
		if report.Password == "" && r.password != nil {
			report.Password = r.password(machineID)
		}

		stored, err := r.transitions.StoreAgentBMC(ctx, machineID, transitions.AgentBMC{
			Address: report.Address, Port: report.Port, User: report.User, Password: report.Password,
		})
		if err != nil {
			return err
		}

		// Never the password.
		r.logger.Info("BMC credentials provisioned by the agent", zap.String("machine", machineID),
			zap.String("address", report.Address), zap.Uint32("port", report.Port), zap.String("user", report.User), zap.Bool("stored", stored))
	}

	return r.status.RecordBMCOrder(ctx, machineID, report.Order, report.Failure)
}

func (r agentRecorder) RecordWiped(ctx context.Context, machineID string, wipe resources.WipeRecord) error {
	if r.omni != nil {
		// What Omni had counted when the wipe completed: installs counted after it are
		// of a Talos on the wiped disks; the token it had is void now.
		om, err := safe.StateGetByID[*resources.OmniMachine](ctx, r.omni, machineID)

		switch {
		case err == nil:
			wipe.OmniInstallEvents, wipe.OmniNodeUniqueToken = om.TypedSpec().InstallEventID, om.TypedSpec().NodeUniqueToken
		case !state.IsNotFoundError(err):
			return fmt.Errorf("error reading Omni's view of machine %s: %w", machineID, err)
		}
	}

	return r.status.RecordWiped(ctx, machineID, wipe)
}

// RecordInventory stores the inventory, and on the machine's status what the kexec deny
// list makes of its hardware.
func (r agentRecorder) RecordInventory(ctx context.Context, machineID string, spec resources.MachineInventorySpec) error {
	if err := r.inventory.RecordInventory(ctx, machineID, spec); err != nil {
		return err
	}

	return r.status.RecordKexecBlockers(ctx, machineID, inventory.KexecBlockers(&spec), spec.KexecUnavailable)
}

func (r agentRecorder) RecordKexecOrdered(ctx context.Context, machineID, allocationID string) error {
	return r.status.RecordKexecOrdered(ctx, machineID, allocationID)
}

func (r agentRecorder) RecordKexecLoaded(ctx context.Context, machineID, allocationID string) error {
	return r.status.RecordKexecLoaded(ctx, machineID, allocationID)
}

func (r agentRecorder) RecordKexecFailed(ctx context.Context, machineID, allocationID, why string) error {
	return r.status.RecordKexecFailed(ctx, machineID, allocationID, why)
}
